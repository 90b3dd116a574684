// `npm run drill` — the recovery drill MC-RT-01, run for real.
//
// Open-loop load through the gateway (card authorizations and tax quotes at
// their own fixed rates, latency from each request's scheduled send time) plus
// an INC-4491 client that re-sends the same tax quote every 50 ms without
// backoff. After a baseline, the tax sandbox's latency goes to 8,000 ms for the
// fault window (set through the deck, as an operator would), then back to
// normal. The deck (which polls each lane every 500 ms) is read every 250 ms
// for lane states, active permits and every process's RSS. Afterwards the
// database is asked whether any authorization was lost, doubled or written though refused, and whether any
// role holds orphaned connections. Writes drill.json and drill.html; exits 1
// when a criterion fails (2 when the drill itself could not run).
//
//   npm run drill                                  # spec figures, fleet started here
//   npm run drill -- --card-rate 300 --fault-seconds 30
//   npm run drill -- --gateway http://gw:8080 --deck http://127.0.0.1:9090   # API_KEY, ADMIN_TOKEN, DATABASE_URL from env
//   npm run drill -- --fault cpu                   # a fault in the tax lane's own code (a fleet started here only)
//
// --fault slow-provider (default) is the sandbox's latency, set through the
// deck, so it works against any fleet. cpu, loop-block, memory and crash are
// put into the tax lane's own process by a preload (benchmarks/faults/) with a
// heap limit (--tax-heap-mb), which only a fleet the drill starts itself can
// carry: the deck has no admin route that loads code into, or kills, a lane's
// process, so against --gateway/--deck only slow-provider is possible. For those
// faults the tax lane's own answers (503 while it is down or overloaded) are
// reported, not judged; card-auth's are judged as always, and the criteria
// about tax shedding (SATURATED, shed timing, permits after) are replaced by
// "the fault took effect".
import crypto from 'node:crypto'
import { seedLoadCards } from '../../services/card-auth/seed.ts'
import { checkConnections, checkLedger } from './after-checks.ts'
import { DrillClients } from './clients.ts'
import { FaultSchedule } from './fault.ts'
import { fleetUnderTest, pinGenerator, placement } from './fleet.ts'
import { recordRun } from './load.ts'
import { HELP, parseDrillFlags, UsageError, type DrillOptions, type ParsedFlags } from './options.ts'
import { printSummary, writeReport } from './render.ts'
import { buildReport, type DrillReport } from './report.ts'
import { settle, warmUp } from './warmup.ts'

/** 0 every criterion passed, 1 one failed, 2 the drill could not run (or a flag is wrong). */
async function main (): Promise<number> {
  let flags: ParsedFlags
  try {
    flags = parseDrillFlags(process.argv.slice(2))
  } catch (err) {
    if (!(err instanceof UsageError)) throw err
    console.error(err.message)
    return 2
  }
  if (flags.help) { console.log(HELP); return 0 }
  const report = await drill(flags.options)
  return report.pass ? 0 : 1
}

/** The phases in order, against a fleet that is always stopped afterwards. */
async function drill (o: DrillOptions): Promise<DrillReport> {
  const runId = crypto.randomBytes(4).toString('hex')
  const fleet = await fleetUnderTest(o)
  const generatorPinned = pinGenerator(o, fleet)
  const clients = new DrillClients(fleet, o)
  try {
    await clients.db.connect()
    await seedLoadCards(clients.db, 1_000)
    const fault = new FaultSchedule(fleet, clients, o)
    await fault.reset()
    await warmUp(clients, o, runId)
    const settledMs = await settle(clients, o)
    const recorded = await recordRun(o, clients, runId, fault)
    const ledger = await checkLedger(clients.db, runId, recorded.card)
    const connections = await checkConnections(clients.db)
    const report = buildReport({
      o,
      runId,
      placement: placement(o, fleet, generatorPinned),
      settledMs,
      recorded,
      fault,
      ledger,
      connections,
    })
    writeReport(report, o.outDir)
    printSummary(report, o.outDir)
    return report
  } finally {
    await clients.close()
    await fleet.stop()
  }
}

process.exitCode = await main().catch(err => { console.error('drill could not run:', err); return 2 })
