// The worker vacuums the claim table every so many claims (shared/queue/vacuum.ts
// says why): with the MAINTAIN privilege migrate grants, the vacuums show in the
// table's statistics; without it the worker says so once and works on.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { eventually } from './helpers/http.ts'
import { counts, createQueue, enqueueMany, startWorker } from './helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'vac', null)
const manualVacuums = async (): Promise<number> => {
  const [r] = await db.query<{ n: number }>("select vacuum_count::int as n from pg_stat_user_tables where schemaname = 'jobs' and relname = 'jobs_hot'")
  return r!.n
}

t.test('a worker vacuums jobs_hot after its claims; one without the privilege warns and works on', async t => {
  t.equal(await manualVacuums(), 0, 'no vacuum yet')
  await enqueueMany(db, 'vac', 'noop', 300)
  const w = await startWorker(t, db, ['vac'], { WORKER_VACUUM_EVERY_JOBS: '50', WORKER_VACUUM_MIN_MS: '0' }, 'worker-vac')
  t.ok(await eventually(async () => (await counts(db, 'vac')).hot === 0, 20_000, 50), 'all 300 jobs done')
  // Table statistics reach the view when the vacuuming backend next reports them (within a second or so of idle).
  t.ok(await eventually(async () => (await manualVacuums()) > 0, 20_000, 100), 'jobs_hot was vacuumed (pg_stat_user_tables.vacuum_count)')
  t.notOk(w.log.some(l => l.includes('may not vacuum')), 'no warning: the role has MAINTAIN')
  await w.kill('SIGTERM')

  await db.query(`revoke maintain on table jobs.jobs_hot from ${db.prefix}jobs_ds`)
  t.teardown(() => db.query(`grant maintain on table jobs.jobs_hot to ${db.prefix}jobs_ds`))
  await enqueueMany(db, 'vac', 'noop', 100)
  const w2 = await startWorker(t, db, ['vac'], { WORKER_VACUUM_EVERY_JOBS: '50', WORKER_VACUUM_MIN_MS: '0' }, 'worker-novac')
  t.ok(await eventually(async () => (await counts(db, 'vac')).hot === 0, 20_000, 50), 'its 100 jobs done all the same')
  t.ok(await eventually(async () => w2.log.some(l => l.includes('may not vacuum jobs.jobs_hot')), 10_000, 50), 'it said once that it may not vacuum')
  await w2.kill('SIGTERM')
})
