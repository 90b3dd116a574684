// `npm run bench -- burst`: the shed paths in a burst (issue 15 item 4). Starts the
// fleet (npm start's supervisor, its own data directory and ports), warms the
// client's and the gateway's connections, then, with the tax provider at 8 s:
// rounds of N tax quotes sent at once through the gateway. Every quote beyond the
// lane's permits must be answered by the shed policy (a certified compensated
// quote, or 503 with Retry-After) within 5 ms at the lane: the lane reports the
// whole time the request spent in it, write and commit included, as
// `Server-Timing: answer`, and its decision alone as `admit`. Then, provider back
// to normal: rounds of M fraud screenings at once, every one 200 (scored) or 202
// (queued for async scoring), none 503. Prints one table with the command, date,
// commit and machine; exits 1 when a criterion fails.
import crypto from 'node:crypto'
import { Pool } from 'undici'
import { startLocalFleet } from './local-fleet.ts'
import { gatewayPost, gitCommit, machine, numberFlag, parseFlags, serverTiming } from './run-info.ts'

const { values: a } = parseFlags({
  options: {
    'tax-burst': { type: 'string', default: '60' },
    'fraud-burst': { type: 'string', default: '150' },
    rounds: { type: 'string', default: '3' },
    'provider-latency-ms': { type: 'string', default: '8000' },
    'limit-ms': { type: 'string', default: '5' },
    'base-port': { type: 'string', default: '18580' },
  }
})
const taxBurst = numberFlag(a, 'tax-burst', 1, 1_000)
const fraudBurst = numberFlag(a, 'fraud-burst', 1, 1_000)
const rounds = numberFlag(a, 'rounds', 1, 100)
const providerMs = numberFlag(a, 'provider-latency-ms', 0, 60_000)
const limitMs = numberFlag(a, 'limit-ms', 0, 10_000)
const argv = process.argv.slice(2).join(' ')
const command = `npm run bench -- burst${argv ? ' -- ' + argv : ''}`

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((x, y) => x - y)
  return s.length ? s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]! : NaN
}
const f = (x: number): string => Number.isFinite(x) ? x.toFixed(2) : '–'

interface Shot {
  status: number
  kind: string
  clientMs: number
  laneMs: number | null
  admitMs: number | null
  inprocMs: number | null
  retryAfter?: string
}

const fleet = await startLocalFleet({ dataDir: '.data/bench-burst', basePort: numberFlag(a, 'base-port', 1_024, 60_000), env: { LOG_LEVEL: 'warn' } })
const run = crypto.randomUUID().slice(0, 8)
const width = Math.max(taxBurst, fraudBurst) + 10
const gw = new Pool(fleet.gatewayUrl, { connections: width, pipelining: 1 })
const deck = new Pool(fleet.deckUrl, { connections: 2 })
let failed = false
try {
  const setLatency = async (ms: number): Promise<void> => {
    const r = await deck.request({
      method: 'PUT',
      path: '/admin/faults/tax',
      headers: {
        authorization: `Bearer ${fleet.adminToken}`,
        'x-operator': 'bench-burst',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ latencyMs: ms }),
    })
    await r.body.dump()
    if (r.statusCode !== 200) throw new Error(`deck: ${r.statusCode}`)
  }
  const shoot = async (path: string, body: unknown, key: string): Promise<Shot> => {
    const t0 = performance.now()
    const r = await gatewayPost(gw, fleet.apiKey, path, key, body)
    const json = await r.body.json().catch(() => ({})) as { code?: string, mode?: string }
    const clientMs = performance.now() - t0
    const comp = r.headers['x-tax-compensation'] as string | undefined
    const kind = comp ? `${r.statusCode} compensated (${comp})` : json.code ? `${r.statusCode} ${json.code}` : json.mode ? `${r.statusCode} ${json.mode}` : String(r.statusCode)
    return {
      status: r.statusCode,
      kind,
      clientMs,
      laneMs: serverTiming(r.headers['server-timing'], 'answer'),
      admitMs: serverTiming(r.headers['server-timing'], 'admit'),
      inprocMs: serverTiming(r.headers['server-timing'], 'inproc'),
      retryAfter: r.headers['retry-after'] as string | undefined,
    }
  }
  const taxBody = (i: number) => ({
    jurisdiction: ['US-CA', 'US-NY', 'DE', 'FR', 'GB'][i % 5],
    amount: { value: 10_000 + i, currency: 'EUR' },
  })
  const fraudBody = (i: number) => ({
    cardToken: `tok_burst_${i % 11}`,
    merchantId: 'm_burst',
    amount: { value: 1_000 + i, currency: 'EUR' },
    ipCountry: 'DE',
    billingCountry: i % 3 ? 'DE' : 'FR',
  })

  // Warm-up: every client connection opened, the gateway's upstream pools and the
  // lanes' code paths exercised at normal provider latency.
  await setLatency(20)
  for (let w = 0; w < 3; w++) {
    await Promise.all(Array.from({ length: width }, (_, i) => i % 2
      ? shoot('/v1/tax/quotes', taxBody(i), `burst-${run}-wt-${w}-${i}`)
      : shoot('/v1/fraud/screenings', fraudBody(i), `burst-${run}-wf-${w}-${i}`)))
  }

  const lines: string[] = []
  await setLatency(providerMs)
  const taxRounds: Shot[][] = []
  for (let r = 0; r < rounds; r++) {
    taxRounds.push(await Promise.all(Array.from({ length: taxBurst }, (_, i) => shoot('/v1/tax/quotes', taxBody(i), `burst-${run}-t-${r}-${i}`))))
  }
  await setLatency(20)
  const fraudRounds: Shot[][] = []
  for (let r = 0; r < rounds; r++) {
    fraudRounds.push(await Promise.all(Array.from({ length: fraudBurst }, (_, i) => shoot('/v1/fraud/screenings', fraudBody(i), `burst-${run}-f-${r}-${i}`))))
  }

  const kinds = (shots: Shot[]): string => {
    const counts = shots.reduce<Record<string, number>>((m, s) => { m[s.kind] = (m[s.kind] ?? 0) + 1; return m }, {})
    return Object.entries(counts).map(([k, v]) => `${v} × ${k}`).join(', ')
  }
  lines.push(`| burst | round | answers | shed answers: in the lane p50 / p99 / max (ms) | its decision max (ms) | in the lane before the decision p50 / max (ms) | as the client saw them p50 / max (ms) | shed answers over ${limitMs} ms in the lane |`)
  lines.push('|---|---|---|---|---|---|---|---|')
  taxRounds.forEach((shots, r) => {
    const shed = shots.filter(s => s.admitMs !== null)
    const lane = shed.map(s => s.laneMs ?? Infinity)
    const over = lane.filter(x => !(x < limitMs)).length
    const unshed = shots.filter(s => s.admitMs === null && s.status !== 200)
    const badRetry = shed.filter(s => s.status === 503 && s.retryAfter !== '5').length
    if (over > 0 || unshed.length > 0 || badRetry > 0 || shed.length === 0) failed = true
    lines.push(`| ${taxBurst} tax quotes at once, provider at ${providerMs} ms | ${r + 1} | ${kinds(shots)} | ${f(pct(lane, 0.5))} / ${f(pct(lane, 0.99))} / ${f(Math.max(...lane))} | ${f(Math.max(...shed.map(s => s.admitMs!)))} | ${f(pct(shed.map(s => s.inprocMs ?? NaN), 0.5))} / ${f(Math.max(...shed.map(s => s.inprocMs ?? NaN)))} | ${f(pct(shed.map(s => s.clientMs), 0.5))} / ${f(Math.max(...shed.map(s => s.clientMs)))} | ${over} of ${shed.length}${badRetry ? `; ${badRetry} 503 without Retry-After: 5` : ''} |`)
  })
  fraudRounds.forEach((shots, r) => {
    const shed = shots.filter(s => s.admitMs !== null)
    const lane = shed.map(s => s.laneMs ?? Infinity)
    const over = lane.filter(x => !(x < limitMs)).length
    if (shots.some(s => s.status !== 200 && s.status !== 202)) failed = true
    lines.push(`| ${fraudBurst} fraud screenings at once | ${r + 1} | ${kinds(shots)} | ${f(pct(lane, 0.5))} / ${f(pct(lane, 0.99))} / ${f(Math.max(...lane))} | ${f(Math.max(...shed.map(s => s.admitMs!)))} | ${f(pct(shed.map(s => s.inprocMs ?? NaN), 0.5))} / ${f(Math.max(...shed.map(s => s.inprocMs ?? NaN)))} | ${f(pct(shed.map(s => s.clientMs), 0.5))} / ${f(Math.max(...shed.map(s => s.clientMs)))} | ${over} of ${shed.length} |`)
  })
  console.log(`\n${command}`)
  console.log(`${new Date().toISOString()}, commit ${gitCommit()}, ${machine({ kernel: true })}`)
  console.log(`Criteria: every tax quote beyond the permits answered by the shed policy (compensated, or 503 with Retry-After: 5) within ${limitMs} ms in the lane (Server-Timing answer: arrival to answer, commit included); every fraud screening 200 or 202.\n`)
  console.log(lines.join('\n'))
  console.log(`\n${failed ? 'FAILED' : 'passed'}`)
} finally {
  await gw.close().catch(() => {})
  await deck.close().catch(() => {})
  await fleet.stop()
}
process.exit(failed ? 1 : 0)
