// The retry-storm limit holds at the lane, not only at the gateway's door: an
// attempt the gateway passes on counts until its answer, and its window runs
// from the answer (gateway/sliding-log.ts, hold/release). Counted from
// admission only, a first attempt that reached a backed-up lane late let a
// fifth attempt of the key through one window after the first was admitted, and
// the lane took five attempts of the key within one window.
// The "lane" is an HTTP server on loopback standing where the tax lane would be,
// backed up for the first attempt of each key: it takes that one up (and notes
// its arrival) only 2 s after it came, the others at once.
import http from 'node:http'
import t from 'tap'
import { startLoneGateway } from './helpers/gateway.ts'
import { sleep } from './helpers/http.ts'
import { startRedis } from './helpers/redis.ts'

const W = 2_000
const SLOW_MS = 2_000
const arrivals = new Map<string, number[]>()
const came = new Map<string, number>()
const lane = http.createServer((req, res) => {
  const key = String(req.headers['idempotency-key'])
  req.resume()
  const takeUp = (): void => {
    arrivals.set(key, [...(arrivals.get(key) ?? []), performance.now()])
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: key, tax: { value: 19, currency: 'EUR' } }))
  }
  const first = !came.has(key)
  came.set(key, (came.get(key) ?? 0) + 1)
  if (first) setTimeout(takeUp, SLOW_MS)
  else takeUp()
})
await new Promise<void>(resolve => lane.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>(resolve => { lane.closeAllConnections(); lane.close(() => resolve()) }))
const laneUrl = `http://127.0.0.1:${(lane.address() as { port: number }).port}`
// Both stores of the counters: memory, and Redis (a budget far above the
// default, so a busy test host does not turn a decision local).
const redis = await startRedis(t)
const gateways = {
  memory: await startLoneGateway(t, { RETRY_WINDOW_MS: String(W), TAX_URL: laneUrl }),
  redis: await startLoneGateway(t, { RETRY_WINDOW_MS: String(W), TAX_URL: laneUrl, REDIS_URL: redis.url, RETRY_STORE_BUDGET_MS: '250' }),
}

for (const [store, gw] of Object.entries(gateways)) {
  t.test(`${store}: a fifth attempt one window after a first one the lane took up late is refused: the lane never takes five in a window`, async t => {
    const key = `slow-${store}-${process.pid}`
    const quote = (): ReturnType<typeof gw.post> => gw.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 100, currency: 'EUR' } }, key)
    const t0 = performance.now()
    const first = await quote()
    t.equal(first.status, 200, `the first attempt passed, answered after ${Math.round(performance.now() - t0)} ms`)
    for (let i = 2; i <= 4; i++) t.equal((await quote()).status, 200, `attempt ${i} passed`)
    // One window (plus margin) after the first attempt was admitted, but well within one after it was answered.
    await sleep(Math.max(0, t0 + W + 600 - performance.now()))
    const fifth = await quote()
    t.equal(fifth.status, 429, `the fifth attempt, ${Math.round(performance.now() - t0)} ms after the first was sent, is refused`)
    t.equal(fifth.body?.code, 'ERR_RETRY_STORM_BLOCKED')
    t.ok(Number(fifth.headers['retry-after']) >= 5, `with Retry-After ${fifth.headers['retry-after']}`)
    const seen = arrivals.get(key) ?? []
    const busiest = Math.max(0, ...seen.map(s0 => seen.filter(x => x >= s0 && x < s0 + W).length))
    t.equal(seen.length, 4, 'the lane took up four attempts of the key')
    t.equal(busiest, 4, `at most four within any ${W} ms at the lane (they came at ${seen.map(x => Math.round(x - t0)).join(', ')} ms)`)
  })
}
