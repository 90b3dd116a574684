// `npm run bench -- card-auth`: card authorizations through the gateway, open loop.
// Steps up the arrival rate to find the highest rate this machine sustains
// (>= 99% answered 201 and p99 within the 120 ms SLA), then runs 1,400 req/s
// (the spec's peak) and reports p50/p99 there, whatever the verdict.
// Cards are spread over 1,000 load accounts, as real traffic is.
import os from 'node:os'
import pg from 'pg'
import { Pool } from 'undici'
import { loadCardToken, seedLoadCards } from '../services/card-auth/seed.ts'
import { runOpenLoop, summary } from './open-loop.ts'
import { pinSelf, startLocalFleet } from './local-fleet.ts'
import { gatewayPost, parseFlags } from './run-info.ts'

const { values: a } = parseFlags({
  options: {
    seconds: { type: 'string', default: '10' },
    steps: { type: 'string', default: '200,400,600,800,1000,1200' },
    peak: { type: 'string', default: '1400' },
  }
})
const seconds = Number(a.seconds)
const steps = a.steps!.split(',').map(Number)
const peak = Number(a.peak)
const command = `npm run bench -- card-auth --seconds ${seconds} --steps ${a.steps} --peak ${peak}`

const fleet = await startLocalFleet({ dataDir: '.data/bench-card-auth', basePort: 18280, cpus: '0' })
const pinned = pinSelf('1')
try {
  const db = new pg.Client({ connectionString: fleet.databaseUrl })
  await db.connect()
  await seedLoadCards(db, 1_000)
  await db.end()
  const gw = new Pool(fleet.gatewayUrl, { connections: 512 })
  let n = 0
  const send = async (): Promise<number> => {
    const i = ++n
    const r = await gatewayPost(gw, fleet.apiKey, '/v1/authorizations', `cab-${process.pid}-${i}`, {
      merchantId: 'm_bench',
      cardToken: loadCardToken(i),
      amount: { value: 1, currency: 'EUR' },
    })
    if (r.statusCode === 201) { await r.body.dump(); return 201 }
    const code = ((await r.body.json().catch(() => ({}))) as { code?: string }).code
    codes[code ?? String(r.statusCode)] = (codes[code ?? String(r.statusCode)] ?? 0) + 1
    return r.statusCode
  }
  let codes: Record<string, number> = {}
  await runOpenLoop({ rate: steps[0]!, durationMs: 3_000, send }) // warm-up
  const rows: string[] = []
  let sustained = 0
  let stepsDone = false
  for (const rate of [...steps, peak]) {
    if (stepsDone && rate !== peak) continue
    codes = {}
    const r = await runOpenLoop({ rate, durationMs: seconds * 1000, send })
    const s = summary(r.histogram)
    const okShare = (r.statuses['201'] ?? 0) / r.scheduled
    const holds = okShare >= 0.99 && s.p99Ms <= 120
    if (holds && rate !== peak && rate > sustained) sustained = rate
    rows.push(`| ${rate} | ${r.sentRate.toFixed(0)} | ${(okShare * 100).toFixed(1)}% | ${s.p50Ms.toFixed(1)} | ${s.p99Ms.toFixed(1)} | ${s.maxMs.toFixed(0)} | ${JSON.stringify({ 201: r.statuses['201'] ?? 0, ...codes })} | ${holds ? 'yes' : 'no'} |`)
    console.log(rows[rows.length - 1])
    // A step that fails badly: the higher ones will only fail harder.
    if (!holds && okShare < 0.5) stepsDone = true
    await new Promise(resolve => setTimeout(resolve, 2_000))
  }
  console.log(`\n${command}`)
  console.log(`${new Date().toISOString()}, ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, node ${process.version}; fleet (gateway, lanes, PostgreSQL) pinned to cpu 0, generator to cpu 1: ${fleet.pinned !== undefined && pinned}`)
  console.log('POST /v1/authorizations through the gateway, open loop, latency from scheduled send:\n')
  console.log('| offered req/s | sent req/s | 201 | p50 ms | p99 ms | max ms | answers | holds SLA |\n|---|---|---|---|---|---|---|---|')
  for (const r of rows) console.log(r)
  console.log(`\nhighest sustained rate (>= 99% 201, p99 <= 120 ms): ${sustained || 'none of the steps'} req/s`)
  await gw.close()
} finally {
  await fleet.stop()
}
