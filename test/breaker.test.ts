// DependencyBreaker (shared/breaker.ts) in-process, with real timers: what it
// adds to cockatiel. A slow call counts when it passes the threshold and its
// caller still gets the answer; opening cuts the calls in flight; a breaker that
// is not closed never calls the dependency; only its own probe does, and a
// failed probe doubles the wait up to the cap. Times are lower bounds only.
import t, { type Test } from 'tap'
import { BreakerOpenError, DependencyBreaker, type BreakerOptions } from '../shared/breaker.ts'
import { eventually, sleep } from './helpers/http.ts'

class Down extends Error {}
class NotOurs extends Error {}

function breaker (t: Test, o: Partial<BreakerOptions> = {}): DependencyBreaker {
  const b = new DependencyBreaker({
    dependency: 'dep',
    failureRate: 0.5,
    window: 4,
    minimumCalls: 2,
    slowCallMs: 50,
    halfOpenAfterMs: 100,
    tickMs: 10,
    probe: async () => { throw new Down() },
    isFailure: err => err instanceof Down,
    ...o,
  }).start()
  t.teardown(() => { b.stop() })
  return b
}

const later = <T>(ms: number, v: T, signal?: AbortSignal): Promise<T> => new Promise((resolve, reject) => {
  const timer = setTimeout(() => resolve(v), ms)
  signal?.addEventListener('abort', () => { clearTimeout(timer); reject(signal.reason) })
})

t.test('a slow call counts at the threshold, and its caller still gets the answer', async t => {
  const b = breaker(t, { minimumCalls: 4 })
  t.equal(await b.call(() => later(5, 'fast')), 'fast')
  t.equal(await b.call(signal => later(120, 'slow', signal)), 'slow', 'the caller waited for the slow answer')
  t.equal(b.state, 'closed', 'one slow call in two is not enough to open')
})

t.test('opening cuts the calls in flight; while open nothing is called', async t => {
  const b = breaker(t)
  const inFlight = [1, 2, 3].map(() => b.call(signal => later(5_000, 'never', signal)))
  const results = await Promise.allSettled(inFlight)
  t.ok(results.every(r => r.status === 'rejected' && r.reason instanceof BreakerOpenError), 'each was cut with BreakerOpenError, long before its 5 s')
  t.equal(b.state, 'open')
  let called = 0
  await t.rejects(b.call(async () => { called++; return 1 }), BreakerOpenError)
  t.equal(called, 0, 'the dependency was not called')
  t.ok(b.counts.shortCircuited >= 1)
})

t.test('errors that are not the dependency\'s do not open it', async t => {
  const b = breaker(t)
  const thrown = async (f: () => Promise<never>): Promise<unknown> =>
    b.call(f).then(() => undefined, (err: unknown) => err)
  for (let i = 0; i < 6; i++) t.ok(await thrown(async () => { throw new NotOurs() }) instanceof NotOurs, 'the caller gets its error')
  t.equal(b.state, 'closed')
  for (let i = 0; i < 2; i++) t.ok(await thrown(async () => { throw new Down() }) instanceof Down)
  t.equal(b.state, 'open', 'two failures of the dependency do')
})

t.test('a failed probe doubles the wait up to the cap; a probe that answers closes it', async t => {
  let healthy = false
  const probedAt: number[] = []
  const transitions: string[] = []
  const b = breaker(t, {
    halfOpenMaxMs: 400,
    probe: async () => { probedAt.push(performance.now()); if (!healthy) throw new Down() },
    onTransition: x => transitions.push(`${x.from}>${x.to}`),
  })
  for (let i = 0; i < 2; i++) await t.rejects(b.call(async () => { throw new Down() }))
  const openedAt = performance.now()
  t.ok(await eventually(async () => probedAt.length >= 5, 10_000, 10), 'it probed again and again')
  const waits = [probedAt[0]! - openedAt, ...probedAt.slice(1).map((x, i) => x - probedAt[i]!)]
  const floor = [100, 200, 400, 400, 400]
  t.ok(floor.every((f, i) => waits[i]! >= f - 15), `waits at least 100, 200, 400, 400, 400 ms (${waits.slice(0, 5).map(Math.round).join(', ')})`)
  healthy = true
  t.ok(await eventually(async () => b.state === 'closed', 10_000, 10), 'closed once a probe answered')
  t.same(transitions.slice(0, 3), ['closed>open', 'open>half_open', 'half_open>open'])
  t.equal(transitions.at(-1), 'half_open>closed')
  t.equal(await b.call(async () => 'ok'), 'ok', 'calls go through again')
  await sleep(0)
})
