// `npm run bench -- compare` — BULKHEAD-PAY-001's comparison table, measured on
// this machine with the fleet's own code in three topologies:
//
//   A  one process, one shared pg pool of 60, one admission limit of 500 in flight
//   B  one process, per-lane admission bulkheads, one shared pg pool of 60
//   C  the fleet (npm start): a process, a pool and a role per lane
//
// and under several faults of the tax lane (--faults): a slow provider (the
// sandbox answers in 8,000 ms, with the tax quote deadline at the spec's 10 s
// socket timeout, as in INC-4491), and faults in the tax lane's own code — cpu,
// loop-block, memory, crash — put there by a preload (benchmarks/faults/) on the
// process that runs tax code, the same way in every topology, together with a
// heap limit (--tax-heap-mb). A monolith that dies is restarted by this bench
// (nothing else would); the fleet's tax lane by its supervisor.
//
// Every topology gets the same open-loop card and tax load through the gateway
// code. One PostgreSQL server (embedded) serves all three; it, the sandbox and
// the system under test are pinned to cpu 0, the load generator to cpu 1.
// Prints one table (topology × fault), writes it to docs/bench-compare.md and
// the raw figures to test-artifacts/bench-compare.json.
import fs from 'node:fs'
import path from 'node:path'
import pg from 'pg'
import { seedLoadCards } from '../../services/card-auth/seed.ts'
import { bootstrapDatabase, localSecrets } from '../../shared/db/bootstrap.ts'
import { pinSelf } from '../local-fleet.ts'
import { gitCommit, machine as machineLine, numberFlag, parseFlags, sleep } from '../run-info.ts'
import { compilePreload, FaultSwitch, taxNodeArgs } from '../faults/control.ts'
import { FAULTS, parseFaults, type FaultName } from '../faults/spec.ts'
import { measure, type FaultHook, type Row } from './measure.ts'
import { renderDoc } from './report.ts'
import { dataDirOf, DESCRIBE, startFleet, startMonolith, startSandbox, type Common, type System, type Topology } from './systems.ts'

const HELP = `npm run bench -- compare [flags]
  --faults LIST        ${FAULTS.join(',')} (default slow-provider)
  --topologies LIST    A,B,C (default C,A,B; C runs first: it writes the API key and tax certificate)
  --fault-seconds N    each fault's window (30); --baseline-seconds (10), --recovery-seconds (30), --warmup-seconds (20)
  --card-rate, --tax-rate (100, 75 req/s); --tax-heap-mb (256): the heap limit of the process running tax code
  --cpu-ms (20), --block-ms (500), --block-every-ms (3000), --retain-mb (4), --fault-latency-ms (8000)`
const { values: a } = parseFlags({
  options: {
    faults: { type: 'string', default: 'slow-provider' },
    'card-rate': { type: 'string', default: '100' },
    'tax-rate': { type: 'string', default: '75' },
    'warmup-seconds': { type: 'string', default: '20' },
    'baseline-seconds': { type: 'string', default: '10' },
    'fault-seconds': { type: 'string', default: '30' },
    'recovery-seconds': { type: 'string', default: '30' },
    'fault-latency-ms': { type: 'string', default: '8000' },
    'tax-deadline-ms': { type: 'string', default: '10000' },
    'client-timeout-ms': { type: 'string', default: '5000' },
    'tax-client-timeout-ms': { type: 'string', default: '12000' },
    'tax-heap-mb': { type: 'string', default: '256' },
    'cpu-ms': { type: 'string', default: '20' },
    'block-ms': { type: 'string', default: '500' },
    'block-every-ms': { type: 'string', default: '3000' },
    'retain-mb': { type: 'string', default: '4' },
    'sla-ms': { type: 'string', default: '120' },
    topologies: { type: 'string', default: 'C,A,B' },
    'base-port': { type: 'string', default: '18480' },
    doc: { type: 'string', default: 'docs/bench-compare.md' },
    help: { type: 'boolean', default: false },
  },
}, HELP)
if (a.help) { console.log(HELP); process.exit(0) }
const N = (k: keyof typeof a, min = 0): number => numberFlag(a, k, min)
const P = {
  cardRate: N('card-rate', 1),
  taxRate: N('tax-rate', 1),
  warmupS: N('warmup-seconds'),
  baselineS: N('baseline-seconds', 1),
  faultS: N('fault-seconds', 1),
  recoveryS: N('recovery-seconds', 3),
  faultLatencyMs: N('fault-latency-ms'),
  taxDeadlineMs: N('tax-deadline-ms'),
  clientTimeoutMs: N('client-timeout-ms'),
  taxClientTimeoutMs: N('tax-client-timeout-ms'),
  taxHeapMb: N('tax-heap-mb', 32),
  slaMs: N('sla-ms'),
  fault: { cpuMs: N('cpu-ms'), blockMs: N('block-ms'), blockEveryMs: N('block-every-ms', 1), retainMb: N('retain-mb') },
}
const parsed = parseFaults(a.faults!)
const topologies = a.topologies!.split(',').map(s => s.trim().toUpperCase()) as Topology[]
if (!parsed || !topologies.every(t => ['A', 'B', 'C'].includes(t))) { console.error(HELP); process.exit(2) }
const faults: FaultName[] = parsed
const argv = process.argv.slice(2).join(' ')
const command = `npm run bench -- compare${argv ? ' -- ' + argv : ''}`
const root = path.resolve(import.meta.dirname, '../..')
const dataDir = dataDirOf(root)
const SERVER_CPU = '0'

async function main (): Promise<void> {
  const commit = gitCommit(root) // the code measured: taken before anything runs
  fs.mkdirSync(dataDir, { recursive: true })
  const preload = compilePreload(dataDir)
  const faultSwitch = new FaultSwitch(path.join(dataDir, 'tax-fault.json'), P.fault)
  const common: Common = {
    root,
    dataDir,
    basePort: N('base-port', 1024),
    cpus: SERVER_CPU,
    taxNodeArgs: taxNodeArgs(preload, P.taxHeapMb),
    faultEnv: faultSwitch.env,
  }
  // PostgreSQL, shared by all three topologies, on the system's cpu: started while
  // this process is pinned there, so the server inherits that pinning.
  const pinnedServer = pinSelf(SERVER_CPU)
  const secrets = localSecrets(dataDir)
  const db = await bootstrapDatabase({
    dataDir,
    port: common.basePort + 49,
    database: 'watertight',
    secrets,
    log: m => console.log(`  ${m}`),
  })
  const pinned = pinnedServer && pinSelf('1')
  const admin = new pg.Client({ connectionString: db.superUrl })
  await admin.connect()
  await seedLoadCards(admin, 1_000)
  const rows: Row[] = []
  const env = { DATABASE_URL: db.superUrl, TAX_QUOTE_DEADLINE_MS: String(P.taxDeadlineMs) }
  try {
    const order = topologies.includes('C') ? ['C' as const, ...topologies.filter(t => t !== 'C')] : topologies
    let apiKey: string | undefined
    let sandbox: { url: string, stop (): Promise<void> } | undefined
    for (const t of order) {
      console.log(`topology ${t}: ${DESCRIBE[t]}`)
      let sys: System
      let sandboxUrl: string
      faultSwitch.set('none')
      if (t === 'C') {
        const f = await startFleet(common, env)
        sys = f; apiKey = f.apiKey; sandboxUrl = f.sandboxUrl
      } else {
        apiKey ??= JSON.parse(fs.readFileSync(path.join(dataDir, 'credentials.json'), 'utf8')).apiKey as string
        sandbox ??= await startSandbox(common)
        sandboxUrl = sandbox.url
        sys = await startMonolith(common, t, { ...env, DATA_DIR: dataDir, TAX_PROVIDER_URL: sandboxUrl })
      }
      const setLatency = async (ms: number): Promise<void> => {
        const r = await fetch(`${sandboxUrl}/faults`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ latencyMs: ms }) })
        if (!r.ok) throw new Error(`sandbox faults: ${r.status}`)
      }
      const hook: FaultHook = async (f, on) => {
        if (f === 'slow-provider') await setLatency(on ? P.faultLatencyMs : 0)
        else faultSwitch.set(on ? f : 'none')
      }
      try {
        await setLatency(0)
        const r = await measure(t, sys, apiKey!, faults, P, hook)
        rows.push(...r)
        for (const x of r) console.log(`  ${t} ${x.fault}: card p99 ${x.card.p99Ms.toFixed(1)} ms, errors ${(x.card.errorRate * 100).toFixed(1)}%, recovered card ${x.recoveredS.card ?? '–'} s / tax ${x.recoveredS.tax ?? '–'} s, peak RSS ${x.peakRssMb} MB`)
      } finally {
        faultSwitch.set('none')
        await sys.stop()
      }
      await sleep(3_000)
    }
    await sandbox?.stop()
  } finally {
    await admin.end()
    await db.embedded?.stop()
  }

  const stamp = {
    command,
    date: new Date().toISOString(),
    commit,
    machine: machineLine({ kernel: true }),
    placement: pinned ? 'system under test, the sandbox and PostgreSQL pinned to cpu 0; load generator to cpu 1' : 'not pinned (no taskset)',
  }
  const doc = renderDoc(stamp, P, faults, rows)
  const docPath = path.resolve(root, a.doc!)
  fs.mkdirSync(path.dirname(docPath), { recursive: true })
  fs.writeFileSync(docPath, doc)
  fs.mkdirSync(path.join(root, 'test-artifacts'), { recursive: true })
  fs.writeFileSync(path.join(root, 'test-artifacts/bench-compare.json'), JSON.stringify({ ...stamp, params: P, rows }, null, 2))
  console.log('\n' + doc)
  console.log(`written: ${path.relative(root, docPath)}, test-artifacts/bench-compare.json`)
}

await main()
