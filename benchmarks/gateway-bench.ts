// `npm run bench -- gateway`: the latency the gateway adds over calling the lane
// directly, at a fixed open-loop request rate. Same requests, same lane, same
// run: direct and through the gateway alternate (A B A B) so machine noise hits
// both alike. Prints p50/p99 and the gateway's added latency.
import os from 'node:os'
import { Pool } from 'undici'
import { runOpenLoop, summary, newHistogram } from './open-loop.ts'
import { pinSelf, startLocalFleet } from './local-fleet.ts'
import { parseFlags } from './run-info.ts'

const { values: a } = parseFlags({
  options: {
    rate: { type: 'string', default: '200' },
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '2' },
  }
})
const rate = Number(a.rate); const seconds = Number(a.seconds); const rounds = Number(a.rounds)
const command = `npm run bench -- gateway --rate ${rate} --seconds ${seconds} --rounds ${rounds}`

const fleet = await startLocalFleet({ dataDir: '.data/bench-gateway', basePort: 18080, cpus: '0' })
const pinned = pinSelf('1')
try {
  const card = fleet.demoCards[0]!
  const gw = new Pool(fleet.gatewayUrl, { connections: 256 })
  const lane = new Pool(fleet.laneUrls['card-auth'], { connections: 256 })
  let n = 0
  const body = JSON.stringify({ merchantId: 'm_bench', cardToken: card.token, amount: { value: 1, currency: card.currency } })
  const viaGateway = async (): Promise<number> => {
    const r = await gw.request({ method: 'POST', path: '/v1/authorizations', headers: { authorization: `Bearer ${fleet.apiKey}`, 'idempotency-key': `bench-${process.pid}-${++n}`, 'content-type': 'application/json' }, body })
    await r.body.dump(); return r.statusCode
  }
  const direct = async (): Promise<number> => {
    const r = await lane.request({ method: 'POST', path: '/v1/authorizations', headers: { 'x-client-id': 'local-demo', 'idempotency-key': `bench-${process.pid}-${++n}`, 'content-type': 'application/json' }, body })
    await r.body.dump(); return r.statusCode
  }
  // Warm both paths (JIT, pools, connections).
  await runOpenLoop({ rate, durationMs: 3_000, send: direct })
  await runOpenLoop({ rate, durationMs: 3_000, send: viaGateway })
  const all = { direct: newHistogram(), gateway: newHistogram() }
  const statuses: Record<string, Record<string, number>> = { direct: {}, gateway: {} }
  for (let r = 0; r < rounds; r++) {
    for (const [name, send] of [['direct', direct], ['gateway', viaGateway]] as const) {
      const res = await runOpenLoop({ rate, durationMs: seconds * 1000, send })
      all[name].add(res.histogram)
      for (const [s, c] of Object.entries(res.statuses)) statuses[name]![s] = (statuses[name]![s] ?? 0) + c
      const s = summary(res.histogram)
      console.log(`round ${r + 1} ${name.padEnd(7)} p50 ${s.p50Ms.toFixed(2)} ms  p99 ${s.p99Ms.toFixed(2)} ms  max ${s.maxMs.toFixed(1)} ms  sent ${res.sentRate.toFixed(0)} req/s  ${JSON.stringify(res.statuses)}`)
    }
  }
  const d = summary(all.direct); const g = summary(all.gateway)
  console.log(`\n${command}`)
  console.log(`machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, node ${process.version}; fleet pinned to cpu 0, generator to cpu 1: ${fleet.pinned !== undefined && pinned}`)
  console.log(`POST /v1/authorizations at ${rate} req/s open loop, ${rounds} x ${seconds} s each, latency from scheduled send:`)
  console.log(`  direct to card-auth lane   p50 ${d.p50Ms.toFixed(2)} ms   p99 ${d.p99Ms.toFixed(2)} ms   (n=${d.count}, ${JSON.stringify(statuses.direct)})`)
  console.log(`  through the gateway        p50 ${g.p50Ms.toFixed(2)} ms   p99 ${g.p99Ms.toFixed(2)} ms   (n=${g.count}, ${JSON.stringify(statuses.gateway)})`)
  console.log(`  gateway adds               p50 ${(g.p50Ms - d.p50Ms).toFixed(2)} ms   p99 ${(g.p99Ms - d.p99Ms).toFixed(2)} ms`)
  await gw.close(); await lane.close()
} finally {
  await fleet.stop()
}
