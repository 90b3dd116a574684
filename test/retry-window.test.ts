// The retry-storm limit is a sliding window: at most 4 attempts of one
// (client, Idempotency-Key) get past the gateway within ANY window, also around
// the edge of what a fixed window would be, and a client that keeps retrying
// without backoff gets nothing more through until it waits as told.
// A real gateway process with a 2 s window. The sliding window is shown with
// attempts whose answers carry no Retry-After (a body that fails validation:
// past the guard, 400 ERR_VALIDATION; refused, 429 ERR_RETRY_STORM_BLOCKED).
// A retry that comes back sooner than the Retry-After its key was given is
// refused too (ADV-IR-01: no requests without backoff): its lanes are down
// (discard port), so a first attempt gets 503 ERR_LANE_UNAVAILABLE, Retry-After: 5.
import t from 'tap'
import { dropOldest, SlidingLog } from '../gateway/sliding-log.ts'
import { startLoneGateway, type LoneGateway } from './helpers/gateway.ts'
import { sleep, type Res } from './helpers/http.ts'
import { startRedis } from './helpers/redis.ts'

const W = 2_000
const MAX = 4

// Both stores of the counters: this process's memory, and Redis (guard-store.ts)
// with a budget far above the default, so a busy test host does not turn a
// decision local; the limits are the same either way.
const redis = await startRedis(t)
const gateways = {
  memory: await startLoneGateway(t, { RETRY_WINDOW_MS: String(W) }),
  redis: await startLoneGateway(t, { RETRY_WINDOW_MS: String(W), REDIS_URL: redis.url, RETRY_STORE_BUDGET_MS: '250' }),
}

interface Attempt { sentAt: number, res: Res }
const admitted = (a: Attempt): boolean => a.res.status === 400 && a.res.body?.code === 'ERR_VALIDATION'
const refused = (a: Attempt): boolean => a.res.status === 429 && a.res.body?.code === 'ERR_RETRY_STORM_BLOCKED'

/** The most admitted attempts in one window [s, s + w) starting at an admitted attempt. */
function busiestWindow (times: number[], w: number): number {
  return Math.max(0, ...times.map(s => times.filter(x => x >= s && x < s + w).length))
}

t.test('SlidingLog: never more than max in any window, ttl is exactly when room comes back', async t => {
  let now = 0
  const log = new SlidingLog({ capacity: 100, countRejected: false }, () => now)
  // One attempt, then a burst just before where a fixed window (from 0) would end,
  // and more right after it: a fixed window admits 0, 900, 950, 990 and then
  // 1000, 1010, 1050, 1890 — 8 within 1 s.
  const schedule = [0, 900, 950, 990, 1_000, 1_010, 1_050, 1_890, 1_900]
  const ok: number[] = []
  for (const at of schedule) {
    now = at
    if (log.hit('k', 1_000, MAX).current <= MAX) ok.push(at)
  }
  t.same(ok, [0, 900, 950, 990, 1_000, 1_900], 'admitted only while fewer than 4 lay within the last second')
  t.equal(busiestWindow(ok, 1_000), MAX, 'no window holds more than 4')
  now = 1_910
  const h = log.hit('k', 1_000, MAX)
  t.equal(h.current, MAX + 1, 'refused')
  t.equal(h.ttl, 40, 'until the oldest of the last 4 (950) leaves the window')
  now += h.ttl - 1
  t.equal(log.hit('k', 1_000, MAX).current, MAX + 1, 'still refused 1 ms before the ttl')
  now += 1
  t.ok(log.hit('k', 1_000, MAX).current <= MAX, 'admitted at the ttl')
})

t.test('SlidingLog counting refused attempts: a client that never backs off stays refused', async t => {
  let now = 0
  const log = new SlidingLog({ capacity: 100, countRejected: true }, () => now)
  const ok: number[] = []
  let last = { current: 0, ttl: 0 }
  for (now = 0; now < 5_000; now += 50) { last = log.hit('k', 1_000, MAX); if (last.current <= MAX) ok.push(now) }
  t.same(ok, [0, 50, 100, 150], 'four attempts in 5 s of retrying every 50 ms')
  now = now - 50 + last.ttl
  t.ok(log.hit('k', 1_000, MAX).current <= MAX, 'admitted once it waited the ttl it was given')
})

t.test('SlidingLog hold/release: an attempt counts until its answer, and its window runs from the answer', async t => {
  let now = 0
  const log = new SlidingLog({ capacity: 100, countRejected: true }, () => now)
  const W10 = 10_000
  // Four attempts admitted in the first 30 ms, all in flight to a backed-up lane that answers them at 3 s.
  for (now = 0; now <= 30; now += 10) { t.ok(log.hit('k', W10, MAX).current <= MAX, `admitted at ${now} ms`); log.hold('k', 5_000) }
  now = 2_000
  t.equal(log.hit('k', W10, MAX).current, MAX + 1, 'in flight, they count')
  now = 3_000 // the lane answers all four
  for (let i = 0; i < 4; i++) log.release('k')
  now = 10_100
  t.equal(log.hit('k', W10, MAX).current, MAX + 1, '10.1 s after the admissions, still refused: they were answered at 3 s')
  const h = log.peek('k', W10, MAX)
  t.equal(h.ttl, 2_900, 'room again when the answer of 3 s leaves the window (13 s)')
  now = 13_000
  t.ok(log.hit('k', W10, MAX).current <= MAX, 'admitted 10 s after the answers')

  // A hold whose answer never comes (a path that sends none) lasts holdMs, then one window.
  const lost = new SlidingLog({ capacity: 100, countRejected: false }, () => now)
  now = 0
  for (let i = 0; i < MAX; i++) { lost.hit('k', W10, MAX); lost.hold('k', 5_000) }
  now = 14_999
  t.equal(lost.hit('k', W10, MAX).current, MAX + 1, 'held to 5 s, it counts until 15 s')
  now = 15_000
  t.ok(lost.hit('k', W10, MAX).current <= MAX, 'and no longer: a lost answer does not block the key for ever')
  t.equal(log.size + lost.size, 2, 'held keys are not swept while held')
})

t.test('SlidingLog memory is bounded: idle keys are dropped, and never more than capacity', async t => {
  let now = 0
  const log = new SlidingLog({ capacity: 1_000, countRejected: true }, () => now)
  let most = 0
  for (let i = 0; i < 20_000; i++) { now = i; log.hit(`k${i}`, 10_000, MAX); most = Math.max(most, log.size) }
  t.equal(most, 1_000, `at most capacity keys (${most})`)
  // A window later, traffic on a few keys sweeps the idle ones away.
  now = 20_000 + 10_000
  for (let i = 0; i < 200; i++) log.hit(`fresh${i % 3}`, 10_000, MAX)
  t.equal(log.size, 3, 'only the keys used within the window remain')
})

t.test('dropOldest drops the oldest entries first, and stops when the map is empty', async t => {
  const m = new Map([['a', 1], ['b', 2], ['c', 3], ['d', 4]])
  m.delete('b'); m.set('b', 5) // b is now the newest
  dropOldest(m, 2)
  t.same([...m.keys()], ['d', 'b'], 'a and c (the two oldest) are gone, in insertion order')
  dropOldest(m, 10)
  t.equal(m.size, 0, 'more than there are: all of them, no error')
})

async function storm (gw: LoneGateway, key: string, pattern: number[]): Promise<Attempt[]> {
  const out: Attempt[] = []
  const t0 = performance.now()
  for (const at of pattern) {
    const wait = t0 + at - performance.now()
    if (wait > 0) await sleep(wait)
    const sentAt = performance.now()
    out.push({ sentAt, res: await gw.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 0, currency: 'EUR' } }, key) })
  }
  return out
}

for (const [store, gw] of Object.entries(gateways)) {
  t.test(`${store}: through the gateway: at most 4 attempts of a key in any window, also across a window edge`, async t => {
    // Edge: one attempt, then from 0.6 W one every W/16 for 2 W. A window fixed at
    // the first attempt admits 3 more before its end and 4 again right after it.
    const edge = [0, ...Array.from({ length: 32 }, (_, i) => 0.6 * W + i * W / 16)]
    // Steady: one every W/8 for 3 W, never backing off.
    const steady = Array.from({ length: 24 }, (_, i) => i * W / 8)
    const [a, b] = await Promise.all([storm(gw, `edge-${store}-${process.pid}`, edge), storm(gw, `steady-${store}-${process.pid}`, steady)])
    for (const [name, attempts] of [['edge', a], ['steady', b]] as const) {
      const odd = attempts.filter(x => !admitted(x) && !refused(x)).map(x => `${x.res.status} ${x.res.body?.code}`)
      t.same(odd, [], `${name}: every attempt was either let through or refused as a retry storm`)
      const times = attempts.filter(admitted).map(x => x.sentAt)
      t.ok(busiestWindow(times, W) <= MAX, `${name}: no ${W} ms window holds more than ${MAX} admitted attempts (busiest: ${busiestWindow(times, W)}, admitted ${times.length} of ${attempts.length})`)
      t.same(attempts.slice(0, MAX).map(admitted), [true, true, true, true], `${name}: the first try and 3 retries got through`)
    }
    t.equal(b.filter(admitted).length, MAX, 'retrying without backoff for 3 windows got 4 attempts through in all, not 4 per window')

    // When to come back: RateLimit t= is when there is room again, Retry-After (which wins) never less than 5 s.
    const lastA = a.at(-1)!.res
    const lastB = b.at(-1)!.res
    for (const r of [lastA, lastB]) {
      t.ok(Number(r.headers['retry-after']) >= 5, `Retry-After ${r.headers['retry-after']} s, at least the spec's 5`)
      t.match(r.headers['ratelimit-policy'], `"retry-storm";q=${MAX};w=${W / 1000}`, 'the policy: 4 attempts per window')
      t.same(r.body['violated-policies'], ['retry-storm'])
    }
    const reset = (r: Res): number => Number(/;t=(\d+)/.exec(r.headers.ratelimit ?? '')?.[1])
    t.ok(reset(lastA) >= 1 && reset(lastA) <= Number(lastA.headers['retry-after']), `RateLimit t=${reset(lastA)} within Retry-After`)
    const [againA, againB] = await Promise.all([
      sleep(Number(lastA.headers['retry-after']) * 1000).then(() => storm(gw, `edge-${store}-${process.pid}`, [0])),
      sleep(Number(lastB.headers['retry-after']) * 1000).then(() => storm(gw, `steady-${store}-${process.pid}`, [0])),
    ])
    t.ok(admitted(againA![0]!), `after waiting Retry-After ${lastA.headers['retry-after']} s the next attempt gets through`)
    t.ok(admitted(againB![0]!), `after waiting Retry-After ${lastB.headers['retry-after']} s the next attempt gets through`)
  })

  t.test(`${store}: a retry sooner than the Retry-After its key was given is refused unprocessed; one after it goes through`, async t => {
    const key = `backoff-${store}-${process.pid}`
    const quote = () => gw.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 1, currency: 'EUR' } }, key)
    const first = await quote()
    t.equal(first.body.code, 'ERR_LANE_UNAVAILABLE', 'the first attempt reached the (down) lane')
    const retryAfter = Number(first.headers['retry-after'])
    t.equal(retryAfter, 5, 'and was told Retry-After: 5')
    const early = await quote()
    t.equal(early.status, 429, 'an immediate retry is refused')
    t.match(early.body, { code: 'ERR_RETRY_STORM_BLOCKED', reason: 'retry_early', 'violated-policies': ['retry-after'] })
    t.ok(Number(early.headers['retry-after']) >= 4, `and told again when to come back (Retry-After ${early.headers['retry-after']})`)
    // A client that honours it: waits the Retry-After of its last answer.
    await sleep(Number(early.headers['retry-after']) * 1000)
    const later = await quote()
    t.equal(later.body.code, 'ERR_LANE_UNAVAILABLE', 'a retry after the Retry-After is let through')
    const other = await gw.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 1, currency: 'EUR' } }, `other-${store}-${process.pid}`)
    t.equal(other.body.code, 'ERR_LANE_UNAVAILABLE', 'another key of the same client is not held back')
  })
}
