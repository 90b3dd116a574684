// The retry guard's counters in Redis (gateway/guard-store.ts): two gateway
// processes on one real Redis hold ADV-IR-01's per-key limit, the Retry-After
// memory and the client rate as one gateway would. With Redis paused, killed
// and started again, every request is answered without waiting on it, each
// replica enforces its share of the limits alone, and the limits are shared
// again once it is back; the gateways say so once each way.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually, type Res } from './helpers/http.ts'
import { startProcess, type Proc } from './helpers/procs.ts'
import { startRedis } from './helpers/redis.ts'
import { Redis } from 'ioredis'
import { RedisGuardStore, StallBreaker } from '../gateway/guard-store.ts'

const db = await testDatabase(t)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_shared_guard', 'EUR', 1000000000)")
const redis = await startRedis(t)
// A budget far above the default 5 ms: on a busy test host a decision that
// overran it would be made locally, and this file is about sharing them.
const shared = { REDIS_URL: redis.url, GATEWAY_REPLICAS: '2', RETRY_STORE_BUDGET_MS: '250' }
// card-auth logs one line per request at debug: when each attempt reached the lane.
const fleet = await startFleet(t, db, { lanes: ['card-auth'], env: { ...shared, LOG_LEVEL: 'debug' } })
const lane = fleet.lanes['card-auth']!
const gateway = (env: Record<string, string> = {}): Promise<Proc> => startProcess(t, 'gateway', 'gateway/main.ts', {
  GATEWAY_PORT: '0',
  GATEWAY_HOST: '127.0.0.1',
  API_KEYS_FILE: fleet.keysFile,
  ...shared,
  ...env,
  CARD_AUTH_URL: lane.url,
  FRAUD_URL: 'http://127.0.0.1:9',
  TAX_URL: 'http://127.0.0.1:9',
})
const a = fleet.gateway
const b = await gateway()

const body = { merchantId: 'm_shared_guard', cardToken: 'tok_shared_guard', amount: { value: 1, currency: 'EUR' } }
const post = (gw: Proc, key: string, path = '/v1/authorizations', json: unknown = body, apiKey = fleet.apiKey): Promise<Res> =>
  call(gw.url + path, { json, headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key } })
const metric = async (gw: Proc, name: string): Promise<number> => {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec((await call(gw.url + '/metrics')).body as string)
  return m ? Number(m[1]) : NaN
}
const logged = (gw: Proc, text: string): number => gw.log.filter(l => l.includes(text)).length
/** When each authorization with `key`… reached card-auth: its request lines (ms). */
const laneAttempts = (): number[] => lane.log.flatMap(l => {
  try {
    const o = JSON.parse(l) as { msg?: string, time?: number, req?: { method?: string, path?: string } }
    return o.msg === 'request' && o.req?.method === 'POST' && o.req.path === '/v1/authorizations' ? [o.time!] : []
  } catch { return [] }
})
const mostInAnyWindow = (times: number[], windowMs: number): number =>
  Math.max(0, ...times.map(t0 => times.filter(x => x >= t0 && x < t0 + windowMs).length))

t.test('an INC-4491 client alternating between two gateways every 50 ms: at most 4 attempts of its key reach the lane in any 10 s', async t => {
  const before = laneAttempts().length
  const key = `inc-4491-${process.pid}`
  const statuses: Record<string, number> = {}
  const until = Date.now() + 30_000
  for (let i = 0; Date.now() < until; i++) {
    const r = await post(i % 2 === 0 ? a : b, key)
    const k = `${r.status} ${r.body?.code ?? ''}`.trim()
    statuses[k] = (statuses[k] ?? 0) + 1
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  const reached = laneAttempts().slice(before)
  t.ok(reached.length >= 1, `its first attempt reached the lane (${reached.length} did; ${JSON.stringify(statuses)})`)
  t.ok(mostInAnyWindow(reached, 10_000) <= 4, `at most 4 in any 10 s at the lane (${mostInAnyWindow(reached, 10_000)})`)
  t.ok((statuses['429 ERR_RETRY_STORM_BLOCKED'] ?? 0) > 0, 'the rest refused as a retry storm')
})

t.test('a retry sooner than its Retry-After is refused by the other replica', async t => {
  // No tax lane runs here: the answer is 503 ERR_LANE_UNAVAILABLE with Retry-After 5.
  const key = `early-${process.pid}`
  const quote = { jurisdiction: 'DE', amount: { value: 1000, currency: 'EUR' } }
  const first = await post(a, key, '/v1/tax/quotes', quote)
  t.equal(first.headers['retry-after'], '5', `first answered with Retry-After 5 (${first.status} ${first.body?.code})`)
  // The answer is noted in Redis after it is sent: wait until the other replica refuses.
  const early = await eventually(async () => { const r = await post(b, key, '/v1/tax/quotes', quote); return r.body?.reason === 'retry_early' ? r : undefined }, 3_000, 20)
  t.equal(early?.status, 429, 'its retry at once on the other gateway: 429')
  t.equal(early?.body?.code, 'ERR_RETRY_STORM_BLOCKED', 'ERR_RETRY_STORM_BLOCKED, retry_early')
})

t.test('the client rate is counted once for both replicas', async t => {
  const env = { CLIENT_RATE_MAX: '10', CLIENT_RATE_WINDOW_MS: '60000' }
  const [c, d] = await Promise.all([gateway(env), gateway(env)])
  const statuses: number[] = []
  for (let i = 0; i < 20; i++) statuses.push((await call(`${(i % 2 === 0 ? c : d).url}/v1/tax/quotes/00000000-0000-4000-8000-000000000000`, { headers: { authorization: `Bearer ${fleet.apiKey}` } })).status)
  // The test client has used its rate on c and d in no earlier test: a fresh window of 10.
  t.equal(statuses.filter(s => s !== 429).length, 10, `10 of 20 let through across both (${statuses.join(' ')})`)
  t.equal(statuses.filter(s => s === 429).length, 10, 'and 10 refused')
  await Promise.all([c.kill(), d.kill()])
})

const limits = {
  windowMs: 10_000,
  perKeyAttempts: 4,
  holdMs: 1_000,
  budgetRatio: 0.2,
  budgetFloor: 10,
  clientRateMax: 1_000,
  clientRateWindowMs: 60_000,
}

t.test('a decision that reaches Redis twice is counted once', async t => {
  const store = new RedisGuardStore({ url: redis.url, budgetMs: 250 }, limits)
  t.teardown(() => store.close())
  t.ok(await store.connected(5_000), 'connected')
  const again = []
  for (let i = 0; i < 6; i++) again.push((await store.decide('resent-client', 'k', 'one-id')).verdict)
  t.same(again, ['ok', 'ok', 'ok', 'ok', 'ok', 'ok'], 'the same decision six times: the same answer, not a storm')
  const next = []
  for (let i = 0; i < 4; i++) next.push((await store.decide('resent-client', 'k', `id-${i}`)).verdict)
  t.same(next, ['ok', 'ok', 'ok', 'retry_storm'], 'it counted as one attempt: three more get through, the fifth is refused')
})

t.test('a busy gateway does not take a quick Redis for a slow one', async t => {
  // Budget 5 ms; the event loop is then held for 250 ms, in which Redis answers
  // and the timer expires both: the answer, already in the socket, wins.
  const store = new RedisGuardStore({ url: redis.url, budgetMs: 5 }, limits)
  t.teardown(() => store.close())
  t.ok(await store.connected(5_000), 'connected')
  const verdicts = []
  for (let i = 0; i < 5; i++) {
    const d = store.decide('busy-client', `busy-${i}`, `busy-id-${i}`).then(x => x.verdict, (e: Error) => e.message)
    const until = performance.now() + 250
    while (performance.now() < until) { /* the gateway busy with other requests */ }
    verdicts.push(await d)
  }
  t.same(verdicts, ['ok', 'ok', 'ok', 'ok', 'ok'], 'each decided by Redis, none timed out')
})

t.test('one round trip per request: an answer\'s release rides on the next decision, or goes alone soon after', async t => {
  const store = new RedisGuardStore({ url: redis.url, budgetMs: 250 }, limits)
  const other = new RedisGuardStore({ url: redis.url, budgetMs: 250 }, limits)
  const admin = new Redis(redis.url)
  t.teardown(async () => { await store.close(); await other.close(); admin.disconnect() })
  t.ok(await store.connected(5_000) && await other.connected(5_000), 'connected')
  const scripts = async (): Promise<number> => {
    const info = await admin.info('commandstats')
    return [...info.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)].reduce((n, m) => n + Number(m[1]), 0)
  }
  const held = async (key: string, id: string): Promise<number> => {
    const [sec, us] = await admin.time()
    return Number(await admin.zscore(`wt:log:ride-client\u0000${key}`, id)) - (Number(sec) * 1000 + Math.floor(Number(us) / 1000))
  }
  t.equal((await store.decide('ride-client', 'k1', 'ride-1')).verdict, 'ok', 'the first decision')
  t.ok(await held('k1', 'ride-1') > 500, 'its attempt is held while in flight (scored at now + hold)')
  const before = await scripts()
  store.answered('ride-client', 'k1', 'ride-1', true, 0)
  t.equal((await store.decide('ride-client', 'k2', 'ride-2')).verdict, 'ok', 'the next decision')
  t.equal(await scripts() - before, 1, 'the answer and the next decision: one script call')
  t.ok(await held('k1', 'ride-1') <= 0, 'and the first attempt now counts from its answer')

  store.answered('ride-client', 'k2', 'ride-2', true, 0)
  t.ok(await eventually(async () => await held('k2', 'ride-2') <= 0 ? true : undefined, 5_000, 20), 'with no decision after it, the release goes alone')

  // A Retry-After goes at once: the client's early retry may come through another replica.
  t.equal((await store.decide('ride-client', 'k3', 'ride-3')).verdict, 'ok', 'a third key')
  store.answered('ride-client', 'k3', 'ride-3', true, 5_000)
  const early = await eventually(async () => { const d = await other.decide('ride-client', 'k3', `ride-3-retry-${Math.random()}`); return d.verdict === 'retry_early' ? d : undefined }, 5_000, 5)
  t.equal(early?.verdict, 'retry_early', 'its retry on the other replica is refused as early')
})

t.test('the store\'s breaker opens on a stall, not on a hiccup', async t => {
  let now = 0
  const b = new StallBreaker(100, () => now)
  const fails = (n: number, everyMs: number): boolean[] =>
    Array.from({ length: n }, () => { now += everyMs; return b.failure() })
  t.notOk(fails(50, 0.2).some(Boolean), '50 decisions missing their budget within 10 ms (one hiccup under load): still closed')
  b.success()
  t.same(fails(3, 250), [false, false, true], 'three in a row over 500 ms (a hung store at a slow budget): open at the third')
  b.success()
  const long = fails(30, 5)
  t.equal(long.indexOf(true), 20, 'one decision every 5 ms, each missing: open once the misses span 100 ms')
})

t.test('Redis paused, killed, started again: nothing waits on it, limits fall back to a share, then are shared again', async t => {
  const answered = async (n: number, what: string): Promise<void> => {
    const slow: number[] = []
    const codes: Record<string, number> = {}
    for (let i = 0; i < n; i++) {
      const t0 = performance.now()
      const r = await post(i % 2 === 0 ? a : b, `${what}-${process.pid}-${i}`)
      const ms = performance.now() - t0
      if (ms > 1_000) slow.push(Math.round(ms))
      codes[r.status] = (codes[r.status] ?? 0) + 1
    }
    t.same(codes, { 201: n }, `${what}: each of ${n} authorizations answered 201`)
    // A store without a bound would hold them until it came back (never, killed): seconds is the order here.
    t.same(slow, [], `${what}: none took a second`)
  }
  t.equal(await metric(a, 'gateway_retry_guard_store_up'), 1, 'shared before')

  redis.pause()
  await answered(20, 'paused')
  for (const gw of [a, b]) t.equal(await metric(gw, 'gateway_retry_guard_store_up'), 0, 'the store is out, says each gateway')
  t.ok(await metric(a, 'gateway_retry_guard_local_decisions_total') > 0, 'and counts the decisions it made alone')
  // Each replica's share of 4 attempts per key: 2.
  const key = `share-${process.pid}`
  const shares = [(await post(a, key)).status, (await post(a, key)).status, (await post(a, key)).status]
  t.same(shares, [201, 201, 429], 'a key\'s third attempt on one replica is refused: its share is 2 of 4')

  await redis.kill()
  await answered(10, 'killed')
  await redis.restart()
  // Each gateway probes it once a second, with no traffic at all.
  const back = await eventually(async () => (await metric(a, 'gateway_retry_guard_store_up')) === 1 && (await metric(b, 'gateway_retry_guard_store_up')) === 1 ? true : undefined, 20_000, 200)
  t.ok(back, 'shared again once Redis is back, without a request to find out')
  for (const gw of [a, b]) {
    t.equal(logged(gw, 'retry guard store unavailable'), 1, 'the outage logged once by each gateway')
    t.equal(logged(gw, 'retry guard store back'), 1, 'and its end once')
  }
  const again = `again-${process.pid}`
  const four = []
  for (let i = 0; i < 4; i++) four.push((await post(i % 2 === 0 ? a : b, again)).status)
  t.same(four, [201, 201, 201, 201], 'four attempts of a key across both')
  t.equal((await post(a, again)).body?.code, 'ERR_RETRY_STORM_BLOCKED', 'the fifth refused: counted together again')
})
