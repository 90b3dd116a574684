// Queue controls apply on the next fetch cycle, without a restart: MaxWorkers
// 3 -> 5 -> 3 (and unlimited), pause (no new claims, running jobs finish),
// deactivate (fetched-but-not-started jobs go back to pending).
import t from 'tap'
import { updateQueue, queueStats } from '../../shared/queue/admin.ts'
import { claim } from '../../shared/queue/claim.ts'
import { testDatabase } from '../helpers/db.ts'
import { eventually, sleep } from '../helpers/http.ts'
import { counts, createQueue, enqueueMany, startWorker } from '../helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'ctl', 3)
await createQueue(db, 'parked', 2)
const active = async (q = 'ctl'): Promise<number> => (await db.query<{ n: number }>("select count(*)::int as n from jobs.jobs_hot where queue = $1 and status in ('fetched', 'processing')", [q]))[0]!.n

t.test('MaxWorkers changes at runtime, pause and resume', async t => {
  await enqueueMany(db, 'ctl', 'sleep', 300, { ms: 250 })
  await startWorker(t, db, ['ctl'], { WORKER_SLOTS: '20', WORKER_POLL_MS: '200' })
  t.ok(await eventually(async () => (await active()) === 3, 5_000, 20), 'runs 3 at MaxWorkers 3')
  let max = 0
  for (let i = 0; i < 20; i++) { max = Math.max(max, await active()); await sleep(25) }
  t.equal(max, 3, 'and never more')

  await updateQueue(db.pool, 'ctl', { maxWorkers: 5 })
  t.ok(await eventually(async () => (await active()) === 5, 1_500, 20), 'raised to 5 within a poll interval or a job, no restart')
  await updateQueue(db.pool, 'ctl', { maxWorkers: 3 })
  // Running jobs finish (250 ms); no new claims until below 3.
  t.ok(await eventually(async () => (await active()) <= 3, 1_500, 20), 'back to 3 once the extra running jobs finish')
  max = 0
  for (let i = 0; i < 20; i++) { max = Math.max(max, await active()); await sleep(25) }
  t.ok(max <= 3, `and stays at most 3 (${max})`)

  await updateQueue(db.pool, 'ctl', { maxWorkers: null })
  t.ok(await eventually(async () => (await active()) > 5, 2_000, 20), 'unlimited: the worker fills its 20 local slots')
  await updateQueue(db.pool, 'ctl', { maxWorkers: 3 })

  await updateQueue(db.pool, 'ctl', { paused: true })
  t.ok(await eventually(async () => (await active()) === 0, 3_000, 20), 'paused: running jobs finish, none are claimed')
  const pending = (await counts(db, 'ctl')).hot
  await sleep(600)
  t.equal((await counts(db, 'ctl')).hot, pending, 'nothing moves while paused')
  const stats = (await queueStats(db.pool)).find(s => s.name === 'ctl')!
  t.ok(stats.paused && stats.jobs.pending === pending && stats.oldestPendingAgeSeconds > 0, 'stats show the paused queue and its lag')
  await updateQueue(db.pool, 'ctl', { paused: false })
  t.ok(await eventually(async () => (await active()) === 3, 2_000, 20), 'resumed')
  await updateQueue(db.pool, 'ctl', { paused: true })
})

t.test('deactivate releases fetched-but-not-started jobs; an inactive queue is not claimed', async t => {
  await enqueueMany(db, 'parked', 'noop', 5)
  const c = await db.pool.connect()
  t.teardown(() => c.release())
  const got = await claim(c, { workerId: 'test-claimer', slots: { parked: 10 } })
  t.equal(got.length, 2, 'claim honours MaxWorkers 2 in one batch')
  await updateQueue(db.pool, 'parked', { active: false })
  const rows = await db.query<{ status: string, n: number }>("select status, count(*)::int as n from jobs.jobs_hot where queue = 'parked' group by status")
  t.same(rows, [{ status: 'pending', n: 5 }], 'the 2 fetched jobs are pending again')
  t.same(await claim(c, { workerId: 'test-claimer', slots: { parked: 10 } }), [], 'an inactive queue gives nothing')
  await updateQueue(db.pool, 'parked', { active: true, zombieTimeoutSeconds: 7 })
  t.equal((await claim(c, { workerId: 'test-claimer', slots: { parked: 10 } })).length, 2, 'active again')
  t.equal((await queueStats(db.pool)).find(s => s.name === 'parked')!.zombieTimeoutSeconds, 7)
  t.equal(await updateQueue(db.pool, 'no-such-queue', { paused: true }), undefined, 'unknown queue')
})
