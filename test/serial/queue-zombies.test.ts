// A worker killed with -9 mid-job: its jobs are rescued by the rules — idempotent
// ones re-run, non-idempotent ones go to jobs_dead as 'zombie' — none is lost,
// and none runs twice unless idempotent. Rescue can never overwrite a job that
// finished meanwhile, and a rescued job's old worker can no longer complete it.
import t from 'tap'
import { claim } from '../../shared/queue/claim.ts'
import { complete } from '../../shared/queue/complete.ts'
import { start } from '../../shared/queue/start.ts'
import { rescueZombies } from '../../shared/queue/rescue.ts'
import { testDatabase } from '../helpers/db.ts'
import { eventually } from '../helpers/http.ts'
import { counts, createQueue, enqueueMany, startWorker } from '../helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'crashy', null, 1)
await createQueue(db, 'guard', null, 1)

t.test('kill -9 mid-job: idempotent jobs re-run, the others are dead-lettered, none lost', async t => {
  await enqueueMany(db, 'crashy', 'sleep', 3, { ms: 3_000 })
  await enqueueMany(db, 'crashy', 'sleep-once', 3, { ms: 3_000 })
  const a = await startWorker(t, db, ['crashy'], { WORKER_RESCUE_MS: '60000' }, 'worker-a')
  t.ok(await eventually(async () => (await db.query("select 1 from jobs.jobs_hot where queue = 'crashy' and status = 'processing'")).length === 6, 5_000, 20), 'all 6 running in worker A')
  await a.kill('SIGKILL')
  await startWorker(t, db, ['crashy'], {}, 'worker-b')
  t.ok(await eventually(async () => { const c = await counts(db, 'crashy'); return c.archive === 3 && c.dead === 3 }, 20_000, 100), 'rescued and settled')
  t.same(await counts(db, 'crashy'), { hot: 0, archive: 3, dead: 3 }, 'none lost, nothing left in jobs_hot')
  const archived = await db.query<{ type: string, attempts: number }>("select type, attempts from jobs.jobs_archive where queue = 'crashy'")
  t.ok(archived.every(r => r.type === 'sleep' && r.attempts === 2), 'the idempotent jobs ran again (attempt 2) and completed')
  const dead = await db.query<{ type: string, reason: string, attempts: number }>("select type, reason, attempts from jobs.jobs_dead where queue = 'crashy'")
  t.ok(dead.every(r => r.type === 'sleep-once' && r.reason === 'zombie' && r.attempts === 1), 'the non-idempotent jobs were not re-run: dead-lettered as zombie after 1 attempt')
})

t.test('rescue never overwrites a finished job; a rescued job cannot be completed by its old worker', async t => {
  await enqueueMany(db, 'guard', 'sleep-once', 1)
  await enqueueMany(db, 'guard', 'sleep', 1)
  const c = await db.pool.connect()
  t.teardown(() => c.release())
  const got = await claim(c, { workerId: 'old-worker', slots: { guard: 2 } })
  const j1 = got.find(j => j.type === 'sleep-once')
  const j2 = got.find(j => j.type === 'sleep')
  for (const j of [j1!, j2!]) t.ok(await start(db.pool, j.id, j.lease!))
  await db.query("update jobs.jobs_hot set heartbeat_at = now() - interval '10 seconds' where queue = 'guard'")
  // j1 completes just before rescue runs: rescue must leave it alone.
  t.ok(await complete(db.pool, j1!.id, j1!.lease!, { ok: true }))
  const r = await rescueZombies(db.pool, { queues: ['guard'], types: [{ type: 'sleep', idempotent: true }, { type: 'sleep-once', idempotent: false }] })
  t.equal(r.dead, 0, 'the finished job was not dead-lettered')
  t.equal(r.requeuedProcessing, 1, 'the idempotent zombie was requeued')
  t.equal((await db.query('select 1 from jobs.jobs_archive where id = $1', [j1!.id])).length, 1, 'j1 stays archived')
  // The old worker wakes up and tries to complete j2: its lease is gone.
  t.notOk(await complete(db.pool, j2!.id, j2!.lease!, {}), 'stale lease: complete changes nothing')
  const [row] = await db.query<{ status: string }>('select status from jobs.jobs_hot where id = $1', [j2!.id])
  t.equal(row!.status, 'pending', 'j2 waits for its re-run')
})

t.test('SIGTERM drains: no new claims, running jobs finish, the process exits cleanly', async t => {
  await createQueue(db, 'drain', null)
  // Jobs of 3 s: a wide window to see both slots busy even on a stalled CI host
  // (with 800 ms jobs, one run missed it: all 4 had finished by the first look).
  await enqueueMany(db, 'drain', 'sleep', 4, { ms: 3_000 })
  const w = await startWorker(t, db, ['drain'], { WORKER_SLOTS: '2' }, 'worker-drain')
  t.ok(await eventually(async () => (await db.query("select 1 from jobs.jobs_hot where queue = 'drain' and status = 'processing'")).length === 2, 10_000, 20), '2 running')
  const exited = new Promise<number | null>(resolve => w.proc.once('exit', code => resolve(code)))
  w.proc.kill('SIGTERM')
  t.equal(await exited, 0, 'exit 0')
  const c = await counts(db, 'drain')
  t.equal(c.archive, 2, 'the 2 running jobs finished')
  t.same(await db.query("select status from jobs.jobs_hot where queue = 'drain' and status <> 'pending'"), [], 'nothing left fetched or processing')
})
