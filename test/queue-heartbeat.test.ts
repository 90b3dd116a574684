// A heartbeat never waits for a row lock: it skips a job whose row another
// transaction holds (the worker's own completion, or a rescue) and refreshes
// the rest. Waiting instead deadlocked with the worker's fetch cycle.
import t from 'tap'
import { fetchJobs } from '../shared/queue/claim.ts'
import { heartbeat } from '../shared/queue/heartbeat.ts'
import { testDatabase } from './helpers/db.ts'
import { createQueue, enqueueMany } from './helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'beat', null)

t.test('a locked job is skipped, not waited for; the others are refreshed', async t => {
  await enqueueMany(db, 'beat', 'noop', 2)
  const { jobs } = await fetchJobs(db.pool, { workerId: 'w-beat', slots: { beat: 2 } })
  t.equal(jobs.length, 2, 'two jobs claimed and started')
  const [a, b] = jobs as [typeof jobs[0], typeof jobs[0]]
  await db.query("update jobs.jobs_hot set heartbeat_at = now() - interval '1 hour' where queue = 'beat'")

  const holder = await db.pool.connect()
  const beater = await db.pool.connect()
  t.teardown(() => { holder.release(); beater.release() })
  await holder.query('begin')
  await holder.query('select 1 from jobs.jobs_hot where id = $1 for update', [b.id])
  // Had it waited, this would fail with lock_timeout (55P03) instead of returning.
  await beater.query("set lock_timeout = '10s'")
  const n = await heartbeat(beater, [{ id: a.id, lease: a.lease! }, { id: b.id, lease: b.lease! }])
  t.equal(n, 1, 'one job refreshed, the locked one skipped')
  await holder.query('rollback')

  const rows = await db.query<{ id: string, fresh: boolean }>("select id, heartbeat_at > now() - interval '1 minute' as fresh from jobs.jobs_hot where queue = 'beat' order by id")
  t.same(rows.map(r => [r.id, r.fresh]), [[a.id, true], [b.id, false]].sort((x, y) => Number(x[0]) - Number(y[0])), 'the unlocked job has a fresh heartbeat, the locked one kept its old one')
  t.equal(await heartbeat(beater, [{ id: b.id, lease: b.lease! }]), 1, 'once the lock is gone, the next heartbeat refreshes it')
  t.equal(await heartbeat(beater, [{ id: b.id, lease: '00000000-0000-0000-0000-000000000000' }]), 0, 'a lease that is not the job\'s refreshes nothing')
})
