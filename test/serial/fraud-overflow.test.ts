// Fraud overload: the first screenings are scored at once (200, sync), the
// overflow is queued on fraud-async (202, async, with Location), every queued one
// ends final, none is lost or scored twice, and the worker never runs more than
// the queue's MaxWorkers at once. Replays return the first answer.
import pg from 'pg'
import t from 'tap'
import { updateQueue } from '../../shared/queue/admin.ts'
import { testDatabase } from '../helpers/db.ts'
import { startFleet } from '../helpers/fleet.ts'
import { admitReason, eventually, sleep } from '../helpers/http.ts'
import { maxConcurrency, startWorker } from '../helpers/queue.ts'

const env = { FRAUD_PERMITS: '2', FRAUD_QUEUE: '1', FRAUD_QUEUE_WAIT_MS: '20' }
const db = await testDatabase(t, env)
const fleet = await startFleet(t, db, { lanes: ['fraud'], env })
await updateQueue(db.pool, 'fraud-async', { maxWorkers: 2 })
const screen = (i: number, key?: string) => fleet.post('/v1/fraud/screenings', { cardToken: `tok_fraud_${i % 7}`, merchantId: 'm_f', amount: { value: 1_000 + i, currency: 'EUR' }, ipCountry: 'DE', billingCountry: i % 3 ? 'DE' : 'FR' }, key)

t.test('overload: sync first, async overflow, every screening final exactly once', async t => {
  // 50 at once: under the gateway's in-flight cap for this lane (2 x (2 + 1) + 150 = 156).
  const rs = await Promise.all(Array.from({ length: 50 }, (_, i) => screen(i, `fr-${i}`)))
  const sync = rs.filter(r => r.status === 200)
  const async = rs.filter(r => r.status === 202)
  const other = rs.filter(r => r.status !== 200 && r.status !== 202).map(r => `${r.status} ${r.body?.code} ${r.body?.detail}`)
  t.equal(sync.length + async.length, 50, `every screening answered 200 or 202 (${sync.length} sync, ${async.length} async; others: ${JSON.stringify(other.slice(0, 3))})`)
  t.ok(sync.length > 0 && async.length > 0, 'both modes under overload')
  t.ok(sync.every(r => r.body.mode === 'sync' && r.body.status === 'final' && typeof r.body.score === 'number'), 'sync answers carry the score')
  t.ok(async.every(r => r.body.mode === 'async' && r.body.status === 'queued' && r.headers.location === `/v1/fraud/screenings/${r.body.id}`), 'async answers are queued, with Location')
  // Every overflow came from an admission decision: shed on arrival because the
  // queue was full, or after its bounded wait in the queue (20 ms budget here).
  // How long a decision takes is a benchmark figure (npm run drill), not asserted.
  const reasons = async.map(admitReason)
  t.ok(reasons.every(r => r === 'queue_full' || r === 'queue_timeout'), `every async answer came from an admission decision (${JSON.stringify([...new Set(reasons)])})`)
  t.ok(reasons.includes('queue_full'), 'some found the queue full and were shed on arrival, without entering it')

  const queued = await db.query("select 1 from jobs.jobs_hot where queue = 'fraud-async'")
  t.equal(queued.length, async.length, 'one fraud-async job per async screening, queued before any worker runs')
  t.same(await db.query("select idempotency_key from jobs.enqueue_keys where queue = 'fraud-async'"), [], 'no enqueue key kept for them: the screening\'s own key makes its job unique')
  const first = await fleet.get(async[0]!.headers.location!)
  t.equal(first.body.status, 'queued', 'GET shows queued before the worker runs')

  await startWorker(t, db, ['fraud-async'], { ...env, FRAUD_DATABASE_URL: db.laneUrl('fraud', env), WORKER_SLOTS: '20' })
  const final = await eventually(async () => (await db.query("select 1 from fraud.screenings where status <> 'final'")).length === 0, 20_000, 100)
  t.ok(final, 'every async screening became final')
  for (const r of async.slice(0, 5)) {
    const g = await fleet.get(r.headers.location!)
    t.match(g.body, { id: r.body.id, mode: 'async', status: 'final', score: Number, decision: /^(approve|review|decline)$/ }, 'GET shows the final result')
  }
  const [{ rows, jobs, attempts }] = await db.query<{ rows: number, jobs: number, attempts: number }>(
    `select (select count(*)::int from fraud.screenings) as rows,
            (select count(*)::int from jobs.jobs_archive where queue = 'fraud-async') as jobs,
            (select coalesce(max(attempts), 0)::int from jobs.jobs_archive where queue = 'fraud-async') as attempts`) as [{ rows: number, jobs: number, attempts: number }]
  t.equal(rows, 50, 'none lost')
  t.equal(jobs, async.length, 'each async screening scored by exactly one job')
  t.equal(attempts, 1, 'none ran twice')
  const conc = await maxConcurrency(db, 'fraud-async')
  t.ok(conc <= 2, `the worker never ran more than MaxWorkers 2 (max ${conc})`)
})

t.test('replays return the first answer, sync or async', async t => {
  const r1 = await screen(1, 'fr-1')
  t.ok([200, 202].includes(r1.status))
  t.equal(r1.headers['idempotent-replayed'], 'true')
  const asyncOne = (await db.query<{ idempotency_key: string }>("select idempotency_key from fraud.screenings where mode = 'async' limit 1"))[0]!
  const i = Number(asyncOne.idempotency_key.slice(3))
  const r2 = await screen(i, asyncOne.idempotency_key)
  t.equal(r2.status, 202, 'an async screening replays its 202')
  t.equal(r2.body.status, 'queued', 'with the first body')
  const reuse = await fleet.post('/v1/fraud/screenings', { cardToken: 'tok_other', merchantId: 'm_f', amount: { value: 5, currency: 'EUR' } }, 'fr-2')
  t.equal(reuse.body.code, 'ERR_IDEMPOTENCY_KEY_REUSED')
})

t.test('saturated and unable to queue: 503 ERR_FRAUD_SATURATED with Retry-After and RateLimit fields', async t => {
  // Both permits held: two screenings block on a lock of their table taken from outside.
  const locker = new pg.Client({ connectionString: db.superUrl })
  await locker.connect()
  t.teardown(() => locker.end())
  await locker.query('begin')
  await locker.query('lock table fraud.screenings in exclusive mode')
  const held = [screen(900, 'fr-held-1'), screen(901, 'fr-held-2')]
  t.ok(await eventually(async () => (await fleet.status('fraud')).active === 2), 'every permit is busy')
  // A read cannot be queued as a screening: past the queue it is refused.
  const r = await fleet.get('/v1/fraud/screenings/00000000-0000-4000-8000-000000000000')
  await locker.query('rollback')
  t.same((await Promise.all(held)).map(x => x.status), [200, 200], 'the held screenings finish once the lock is gone')
  t.equal(r.status, 503, '503')
  t.equal(r.body.code, 'ERR_FRAUD_SATURATED')
  t.equal(r.body.type, 'https://watertight.dev/problems/temporary-reduced-capacity', 'problem type temporary-reduced-capacity')
  t.equal(r.headers['retry-after'], '5', 'Retry-After: 5')
  t.equal(r.headers['ratelimit-policy'], `"fraud";q=${env.FRAUD_PERMITS};w=1`, 'RateLimit-Policy: the lane\'s permits')
  t.equal(r.headers.ratelimit, '"fraud";r=0;t=5', 'RateLimit: none left, room again in 5 s')
  t.same(r.body['violated-policies'], ['fraud'], 'violated-policies')
})

t.test('a screening retried while its first attempt runs is told so at once, then replays', async t => {
  const locker = new pg.Client({ connectionString: db.superUrl })
  await locker.connect()
  t.teardown(() => locker.end())
  await locker.query('begin')
  // Reads go on, the first attempt's insert waits: it is in flight, holding its key.
  await locker.query('lock table fraud.screenings in exclusive mode')
  const first = screen(950, 'fr-inflight')
  // Its permit alone is not enough: the attempt takes its key's lock in its first
  // statement, so wait until its insert is queued behind the table lock.
  const blocked = async () => (await db.query(
    "select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like 'insert into fraud.screenings%'")).length === 1
  t.ok(await eventually(blocked), 'the first attempt runs, its insert waiting on the lock')
  const retry = await screen(950, 'fr-inflight')
  t.equal(retry.status, 409, `the retry is answered at once (${retry.status} ${retry.body?.code})`)
  t.equal(retry.body.code, 'ERR_IDEMPOTENCY_IN_PROGRESS')
  t.equal(retry.headers['retry-after'], '1')
  await locker.query('rollback')
  const a = await first
  // A well-behaved client waits the Retry-After it was given (the gateway refuses a sooner retry).
  await sleep(Number(retry.headers['retry-after']) * 1000)
  const b = await screen(950, 'fr-inflight')
  t.equal(a.status, 200)
  t.same([b.status, b.body.id, b.headers['idempotent-replayed']], [200, a.body.id, 'true'], 'retried after it ended: the same screening, replayed')
})
