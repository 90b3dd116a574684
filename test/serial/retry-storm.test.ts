// INC-4491's client: it retries one failed request every 50 ms without backoff.
// The gateway lets the first try and 3 retries through, then answers 429
// ERR_RETRY_STORM_BLOCKED (with Retry-After) before the lane sees anything,
// while a second, well-behaved client sees no errors and normal latency.
import t from 'tap'
import { testDatabase } from '../helpers/db.ts'
import { startFleet } from '../helpers/fleet.ts'
import { call, percentile, sleep } from '../helpers/http.ts'

const db = await testDatabase(t)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_calm_1', 'EUR', 100000000)")
const fleet = await startFleet(t, db, { lanes: ['card-auth', 'tax'] })
const calmKey = await fleet.addClient('calm-client')
const laneQuoteCount = async (): Promise<number> => {
  const text = (await call(fleet.lanes.tax!.url + '/metrics')).body as string
  return [...text.matchAll(/^http_request_duration_seconds_count\{[^}]*route="\/v1\/tax\/quotes"[^}]*\} (\d+)/gm)].reduce((s, m) => s + Number(m[1]), 0)
}

t.test('a client retrying every 50 ms is cut off after 3 retries; another client is untouched', async t => {
  await fleet.setFaults({ errorRate: 1 })
  const before = await laneQuoteCount()
  const stormy: Array<{ status: number, code?: string, retryAfter?: string, policy?: string }> = []
  const calm: number[] = []
  const calmStatuses: number[] = []
  let stop = false
  const storm = (async () => {
    while (!stop) {
      const r = await fleet.post('/v1/tax/quotes', { jurisdiction: 'US-NV', amount: { value: 1000, currency: 'EUR' } }, 'inc-4491-checkout-42')
      stormy.push({ status: r.status, code: r.body?.code, retryAfter: r.headers['retry-after'], policy: r.headers['ratelimit-policy'] })
      await sleep(50)
    }
  })()
  let i = 0
  const polite = (async () => {
    while (!stop) {
      const r = await call(fleet.gateway.url + '/v1/authorizations', { json: { merchantId: 'm_calm', cardToken: 'tok_calm_1', amount: { value: 10, currency: 'EUR' } }, headers: { authorization: `Bearer ${calmKey}`, 'idempotency-key': `calm-${++i}` } })
      calmStatuses.push(r.status)
      calm.push(r.ms)
      await sleep(20)
    }
  })()
  await sleep(2_000)
  stop = true
  await Promise.all([storm, polite])

  t.ok(stormy.length >= 20, `the stormy client sent ${stormy.length} attempts`)
  t.same(stormy.slice(0, 4).map(s => s.code), Array(4).fill('ERR_TAX_PROVIDER_FAILED'), 'the first try and 3 retries reach the lane (and fail there)')
  const rest = stormy.slice(4)
  t.ok(rest.every(s => s.status === 429 && s.code === 'ERR_RETRY_STORM_BLOCKED'), 'every later attempt is blocked with 429 ERR_RETRY_STORM_BLOCKED')
  t.ok(rest.every(s => Number(s.retryAfter) >= 5), 'with Retry-After of at least 5 s')
  t.ok(rest.every(s => s.policy?.startsWith('"retry-storm"')), 'and a RateLimit-Policy naming the retry-storm quota')
  t.equal(await laneQuoteCount() - before, 4, 'the tax lane saw exactly 4 attempts')

  t.ok(calmStatuses.length > 30 && calmStatuses.every(s => s === 201), `the well-behaved client saw no errors (${calmStatuses.length} requests)`)
  t.comment(`well-behaved client p50 ${percentile(calm, 50).toFixed(1)} ms p99 ${percentile(calm, 99).toFixed(1)} ms during the storm`)
  t.ok(percentile(calm, 99) < 500, 'and normal latency')
  const metrics = (await call(fleet.gateway.url + '/metrics')).body as string
  t.match(metrics, /gateway_retry_storm_blocked_total\{reason="retry_storm"[^}]*\} (\d+)/, 'blocked requests are counted by reason')
  await fleet.setFaults({ mode: 'normal' })
})

t.test('the retry budget caps a client whose retries are spread over many keys', async t => {
  const budgetKey = await fleet.addClient('budget-client')
  const post = (key: string) => call(fleet.gateway.url + '/v1/tax/quotes', { json: { jurisdiction: 'FR', amount: { value: 100, currency: 'EUR' } }, headers: { authorization: `Bearer ${budgetKey}`, 'idempotency-key': key } })
  // 12 distinct requests, then one retry of each: the floor allows 10 retries per window.
  for (let k = 0; k < 12; k++) t.equal((await post(`b-${k}`)).status, 200)
  const retries = []
  for (let k = 0; k < 12; k++) retries.push(await post(`b-${k}`))
  t.ok(retries.slice(0, 10).every(r => r.status === 200 && r.headers['idempotent-replayed'] === 'true'), 'the first 10 retries pass (replayed by the lane)')
  t.ok(retries.slice(10).every(r => r.status === 429 && r.body.code === 'ERR_RETRY_STORM_BLOCKED' && r.body.reason === 'retry_budget'), 'retries over the budget are blocked')
})
