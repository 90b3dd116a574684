// Retries with backoff (the delays themselves: test/backoff.test.ts),
// dead-lettering (max attempts, fatal), requeue from the dead letters, and
// enqueue idempotency; nothing left in jobs_hot that should have moved.
import t from 'tap'
import { listDead, requeueDead } from '../shared/queue/admin.ts'
import { enqueue } from '../shared/queue/enqueue.ts'
import { testDatabase } from './helpers/db.ts'
import { call, eventually } from './helpers/http.ts'
import { counts, createQueue, startWorker } from './helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'retry-q', null)

t.test('enqueue with an idempotency key returns the first job; lane roles may only enqueue', async t => {
  const a = await enqueue(db.pool, 'retry-q', 'noop', { n: 1 }, { idempotencyKey: 'once-only', delayMs: 60_000 })
  const b = await enqueue(db.pool, 'retry-q', 'noop', { n: 2 }, { idempotencyKey: 'once-only' })
  t.ok(a.created)
  t.notOk(b.created)
  t.equal(b.id, a.id)
  await db.query('delete from jobs.jobs_hot where id = $1', [a.id])
  const fraud = new (await import('pg')).default.Client({ connectionString: db.roleUrl(db.prefix + 'fraud_ds') })
  await fraud.connect()
  await t.resolves(fraud.query("select * from jobs.enqueue('retry-q', 'noop', '{}')"), 'the fraud role can enqueue')
  await t.rejects(fraud.query('select * from jobs.jobs_hot'), { code: '42501' }, 'but cannot read the queue tables')
  const card = new (await import('pg')).default.Client({ connectionString: db.roleUrl(db.prefix + 'card_auth_ds') })
  await card.connect()
  await t.rejects(card.query("select * from jobs.enqueue('retry-q', 'noop', '{}')"), { code: '42501' }, 'card-auth owns no queue and cannot enqueue')
  await fraud.end(); await card.end()
  await db.query("delete from jobs.jobs_hot where queue = 'retry-q'")
})

t.test('retries, then success; max attempts and fatal failures go to jobs_dead; requeue brings them back', async t => {
  const ok = await enqueue(db.pool, 'retry-q', 'sleep', { ms: 1, failAttempts: 2 }, { maxAttempts: 5 })
  const exhausted = await enqueue(db.pool, 'retry-q', 'sleep', { ms: 1, failAttempts: 10 }, { maxAttempts: 3 })
  const fatal = await enqueue(db.pool, 'retry-q', 'sleep', { ms: 1, fatal: true }, { maxAttempts: 5 })
  const unknown = await enqueue(db.pool, 'retry-q', 'no-such-type', {}, { maxAttempts: 5 })
  const worker = await startWorker(t, db, ['retry-q'], { WORKER_BACKOFF_BASE_MS: '40' })
  t.ok(await eventually(async () => { const c = await counts(db, 'retry-q'); return c.hot === 0 && c.archive === 1 && c.dead === 3 }, 15_000, 50), 'settled')
  const [arch] = await db.query<{ id: string, attempts: number }>("select id, attempts from jobs.jobs_archive where queue = 'retry-q'")
  t.same(arch, { id: ok.id, attempts: 3 }, 'succeeded on the 3rd attempt after two retries')
  const dead = Object.fromEntries((await listDead(db.pool, 'retry-q')).map(d => [d.id, d]))
  t.match(dead[exhausted.id], { reason: 'max_attempts', attempts: 3, lastError: /failing attempt 3/ })
  t.match(dead[fatal.id], { reason: 'fatal', attempts: 1 })
  t.match(dead[unknown.id], { reason: 'fatal', lastError: /no handler for job type no-such-type/ })

  // Fix the cause, then requeue: the exhausted job gets fresh attempts.
  await db.query("update jobs.jobs_dead set payload = '{\"ms\": 1}' where id = $1", [exhausted.id])
  t.equal(await requeueDead(db.pool, 'retry-q', [exhausted.id]), 1)
  t.ok(await eventually(async () => (await db.query('select 1 from jobs.jobs_archive where id = $1', [exhausted.id])).length === 1, 10_000, 50), 'the requeued job ran and completed under its own id')
  t.same(await counts(db, 'retry-q'), { hot: 0, archive: 2, dead: 2 }, 'nothing left behind in jobs_hot')
  t.equal(await requeueDead(db.pool, 'retry-q'), 2, 'requeue all')

  const metrics = (await call(worker.url + '/metrics')).body as string
  for (const name of ['queue_jobs{queue="retry-q",status="pending"', 'queue_max_workers{queue="retry-q"', 'queue_oldest_pending_age_seconds{queue="retry-q"', 'queue_job_duration_seconds_bucket{', 'process_resident_memory_bytes']) {
    t.ok(metrics.includes(name), `worker metrics expose ${name.split('{')[0]}`)
  }
  t.match(metrics, /queue_job_duration_seconds_count\{[^}]*queue="retry-q",type="sleep",outcome="dead"[^}]*\} [1-9]/, 'job outcomes are counted')
})
