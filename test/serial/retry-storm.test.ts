// INC-4491's client: it retries one failed request every 50 ms without backoff.
// Its first try reaches the lane and fails with Retry-After: 5; every retry that
// ignores it is answered 429 ERR_RETRY_STORM_BLOCKED (with Retry-After) before
// the lane sees anything: as too early while it has retried fewer than 4 times
// in 10 s, as a retry storm after that. A second, well-behaved client meanwhile
// sees no errors. On both stores of the gateway's counters: its memory, and
// Redis (a second gateway with REDIS_URL on the same lanes).
import t from 'tap'
import { testDatabase } from '../helpers/db.ts'
import { startFleet } from '../helpers/fleet.ts'
import { call, eventually, percentile, sleep } from '../helpers/http.ts'
import { startProcess, type Proc } from '../helpers/procs.ts'
import { startRedis } from '../helpers/redis.ts'

const db = await testDatabase(t)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_calm_1', 'EUR', 100000000)")
const fleet = await startFleet(t, db, { lanes: ['card-auth', 'tax'] })
const calmKey = await fleet.addClient('calm-client')
const redis = await startRedis(t)
// A budget far above the default 5 ms, so a busy test host does not turn a decision local.
const redisGateway = await startProcess(t, 'gateway', 'gateway/main.ts', {
  GATEWAY_PORT: '0',
  GATEWAY_HOST: '127.0.0.1',
  API_KEYS_FILE: fleet.keysFile,
  REDIS_URL: redis.url,
  RETRY_STORE_BUDGET_MS: '250',
  CARD_AUTH_URL: fleet.lanes['card-auth']!.url,
  TAX_URL: fleet.lanes.tax!.url,
  FRAUD_URL: 'http://127.0.0.1:9',
})
const storeUp = async (): Promise<boolean> => /^gateway_retry_guard_store_up(?:\{[^}]*\})? 1$/m.test((await call(redisGateway.url + '/metrics')).body as string)
t.ok(await eventually(async () => await storeUp() || undefined, 10_000, 100), 'the Redis gateway decides with its store')
const stores: Array<[string, Proc]> = [['memory', fleet.gateway], ['redis', redisGateway]]
const laneQuoteCount = async (): Promise<number> => {
  const text = (await call(fleet.lanes.tax!.url + '/metrics')).body as string
  return [...text.matchAll(/^http_request_duration_seconds_count\{[^}]*route="\/v1\/tax\/quotes"[^}]*\} (\d+)/gm)].reduce((s, m) => s + Number(m[1]), 0)
}

for (const [store, gateway] of stores) {
  t.test(`${store}: a client retrying every 50 ms without backoff gets nothing more to the lane; another client is untouched`, async t => {
    await fleet.setFaults({ errorRate: 1 })
    const before = await laneQuoteCount()
    const stormy: Array<{ status: number, code?: string, reason?: string, retryAfter?: string, policy?: string }> = []
    const calm: number[] = []
    const calmStatuses: number[] = []
    let stop = false
    const storm = (async () => {
      while (!stop) {
        const r = await call(gateway.url + '/v1/tax/quotes', { json: { jurisdiction: 'US-NV', amount: { value: 1000, currency: 'EUR' } }, headers: { authorization: `Bearer ${fleet.apiKey}`, 'idempotency-key': `inc-4491-checkout-42-${store}` } })
        stormy.push({ status: r.status, code: r.body?.code, reason: r.body?.reason, retryAfter: r.headers['retry-after'], policy: r.headers['ratelimit-policy'] })
        await sleep(50)
      }
    })()
    let i = 0
    const polite = (async () => {
      while (!stop) {
        const r = await call(gateway.url + '/v1/authorizations', { json: { merchantId: 'm_calm', cardToken: 'tok_calm_1', amount: { value: 10, currency: 'EUR' } }, headers: { authorization: `Bearer ${calmKey}`, 'idempotency-key': `calm-${store}-${++i}` } })
        calmStatuses.push(r.status)
        calm.push(r.ms)
        await sleep(20)
      }
    })()
    await sleep(2_000)
    stop = true
    await Promise.all([storm, polite])

    t.ok(stormy.length >= 20, `the stormy client sent ${stormy.length} attempts`)
    t.equal(stormy[0]!.code, 'ERR_TAX_PROVIDER_FAILED', 'the first try reaches the lane (and fails there)')
    t.equal(stormy[0]!.retryAfter, '5', 'and is told Retry-After: 5')
    const rest = stormy.slice(1)
    t.ok(rest.every(s => s.status === 429 && s.code === 'ERR_RETRY_STORM_BLOCKED'), 'every retry that ignores it is blocked with 429 ERR_RETRY_STORM_BLOCKED')
    t.same(rest.slice(0, 3).map(s => s.reason), ['retry_early', 'retry_early', 'retry_early'], 'as too early while it has retried fewer than 4 times')
    t.ok(rest.slice(3).every(s => s.reason === 'retry_storm' && s.policy?.startsWith('"retry-storm"')), 'then as a retry storm, with a RateLimit-Policy naming the retry-storm quota')
    t.ok(rest.every(s => Number(s.retryAfter) >= 4), 'each with a Retry-After of seconds')
    t.equal(await laneQuoteCount() - before, 1, 'the tax lane saw exactly 1 attempt')

    t.ok(calmStatuses.length > 30 && calmStatuses.every(s => s === 201), `the well-behaved client saw no errors (${calmStatuses.length} requests)`)
    t.comment(`well-behaved client p50 ${percentile(calm, 50).toFixed(1)} ms p99 ${percentile(calm, 99).toFixed(1)} ms during the storm`)
    const metrics = (await call(gateway.url + '/metrics')).body as string
    for (const reason of ['retry_early', 'retry_storm']) t.match(metrics, new RegExp(`gateway_retry_storm_blocked_total\\{reason="${reason}"[^}]*\\} [1-9]`), `blocked requests are counted by reason (${reason})`)
    await fleet.setFaults({ mode: 'normal' })
  })

  t.test(`${store}: the retry budget caps a client whose retries are spread over many keys`, async t => {
    const budgetKey = await fleet.addClient(`budget-client-${store}`)
    // Each gateway reads the key file on its own.
    const known = async (): Promise<boolean> => (await call(gateway.url + '/v1/tax/quotes/00000000-0000-4000-8000-000000000000', { headers: { authorization: `Bearer ${budgetKey}` } })).status !== 401
    t.ok(await eventually(async () => await known() || undefined, 10_000, 100), 'this gateway knows the new key')
    const post = (key: string) => call(gateway.url + '/v1/tax/quotes', { json: { jurisdiction: 'FR', amount: { value: 100, currency: 'EUR' } }, headers: { authorization: `Bearer ${budgetKey}`, 'idempotency-key': key } })
    // 12 distinct requests, then one retry of each: the floor allows 10 retries per window.
    for (let k = 0; k < 12; k++) t.equal((await post(`b-${k}`)).status, 200)
    const retries = []
    for (let k = 0; k < 12; k++) retries.push(await post(`b-${k}`))
    t.ok(retries.slice(0, 10).every(r => r.status === 200 && r.headers['idempotent-replayed'] === 'true'), 'the first 10 retries pass (replayed by the lane)')
    t.ok(retries.slice(10).every(r => r.status === 429 && r.body.code === 'ERR_RETRY_STORM_BLOCKED' && r.body.reason === 'retry_budget'), 'retries over the budget are blocked')
  })
}
