// The fleet's one retry delay (shared/backoff.ts): with equal jitter for a
// job's retries (queue/fail.ts) and start-up's connects (db/pool.ts retrying),
// without for the supervisor's restarts (supervisor/child.ts).
import t from 'tap'
import { backoffMs, type Backoff } from '../shared/backoff.ts'

const low = (): number => 0
const high = (): number => 1

t.test('equal jitter: between half the capped exponential delay and all of it', async t => {
  const b: Backoff = { baseMs: 100, capMs: 5_000, jitter: 'equal' }
  t.equal(backoffMs(1, { ...b, random: low }), 50)
  t.equal(backoffMs(1, { ...b, random: high }), 100)
  t.equal(backoffMs(4, { ...b, random: high }), 800)
  t.equal(backoffMs(0, { ...b, random: high }), 100, 'no failure yet counts as the first')
  t.equal(backoffMs(30, { ...b, random: high }), 5_000, 'capped')
  t.equal(backoffMs(30, { ...b, random: low }), 2_500, 'never below half the cap once capped')
  const spread = new Set(Array.from({ length: 50 }, () => backoffMs(3, b)))
  t.ok(spread.size > 10, 'jittered')
  t.ok([...spread].every(ms => ms >= 200 && ms <= 400), 'within [ceiling / 2, ceiling]')
})

t.test('no jitter: exactly the capped exponential delay', async t => {
  const restarts: Backoff = { baseMs: 500, capMs: 10_000, jitter: 'none', random: () => { throw new Error('not drawn') } }
  t.same([1, 2, 3, 4, 5, 6].map(n => backoffMs(n, restarts)), [500, 1_000, 2_000, 4_000, 8_000, 10_000])
})
