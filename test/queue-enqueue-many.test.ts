// enqueueMany / jobs.enqueue_many: many jobs in one statement, in input order,
// with jobs.enqueue's idempotency (a taken key, in the table or earlier in the
// same call, returns the first job), one NOTIFY per call, and the same narrow
// grant: a lane role may call it, but not claim jobs or read the tables.
import pg from 'pg'
import t from 'tap'
import { enqueue, enqueueMany } from '../shared/queue/enqueue.ts'
import { testDatabase } from './helpers/db.ts'
import { eventually, sleep } from './helpers/http.ts'
import { createQueue } from './helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'many-q', null)

t.test('many jobs in one call, in input order, payloads and options kept', async t => {
  const out = await enqueueMany(db.pool, 'many-q', 'noop', Array.from({ length: 500 }, (_, i) => ({ payload: { i } })), { priority: 3, maxAttempts: 7 })
  t.equal(out.length, 500)
  t.ok(out.every(r => r.created), 'all created')
  const rows = await db.query<{ id: string, i: number, priority: number, max_attempts: number }>(
    "select id, (payload->>'i')::int as i, priority, max_attempts from jobs.jobs_hot where queue = 'many-q' order by id")
  t.same(rows.map(r => r.i), Array.from({ length: 500 }, (_, i) => i), 'stored in input order')
  t.same(out.map(r => r.id), rows.map(r => r.id), 'ids returned in input order')
  t.ok(rows.every(r => r.priority === 3 && r.max_attempts === 7), 'options kept')
  t.same(await enqueueMany(db.pool, 'many-q', 'noop', []), [], 'nothing to do for no jobs')
  await db.query("delete from jobs.jobs_hot where queue = 'many-q'")
})

t.test('idempotency keys: taken before, or earlier in the same call, return the first job', async t => {
  const first = await enqueue(db.pool, 'many-q', 'noop', {}, { idempotencyKey: 'k-old' })
  const out = await enqueueMany(db.pool, 'many-q', 'noop', [
    { payload: { n: 1 }, idempotencyKey: 'k-new' },
    { payload: { n: 2 }, idempotencyKey: 'k-old' },
    { payload: { n: 3 } },
    { payload: { n: 4 }, idempotencyKey: 'k-new' },
  ])
  t.same(out.map(r => r.created), [true, false, true, false])
  t.equal(out[1]!.id, first.id, 'a key taken before returns its job')
  t.equal(out[3]!.id, out[0]!.id, 'a key repeated in the call returns its first job')
  const again = await enqueueMany(db.pool, 'many-q', 'noop', [{ idempotencyKey: 'k-new' }, { idempotencyKey: 'k-3' }])
  t.same(again, [{ id: out[0]!.id, created: false }, { id: again[1]!.id, created: true }], 'and in a later call too')
  const [{ n }] = await db.query<{ n: number }>("select count(*)::int as n from jobs.jobs_hot where queue = 'many-q'") as [{ n: number }]
  t.equal(n, 4, 'one job per key (k-old, k-new, k-3) plus the keyless one')
  await t.rejects(db.query("select * from jobs.enqueue_many('many-q', 'noop', array['{}'::jsonb, '{}'], array['only-one'])"), { code: '22023' }, 'one key per payload, or none')
  await db.query("delete from jobs.jobs_hot where queue = 'many-q'")
})

t.test('one NOTIFY per call wakes the workers once', async t => {
  const l = new pg.Client({ connectionString: db.superUrl })
  await l.connect()
  t.teardown(() => l.end())
  const got: string[] = []
  l.on('notification', m => { if (m.payload === 'many-q') got.push(m.channel) })
  await l.query('listen jobs_enqueued')
  await enqueueMany(db.pool, 'many-q', 'noop', Array.from({ length: 100 }, () => ({})))
  t.ok(await eventually(async () => got.length > 0, 5_000, 10), 'notified')
  await enqueue(db.pool, 'many-q', 'noop', {})
  t.ok(await eventually(async () => got.length > 1, 5_000, 10), 'and a single enqueue after it')
  await sleep(100)
  t.equal(got.length, 2, 'one notification for the 100 jobs of the call, one for the single enqueue')
  await db.query("delete from jobs.jobs_hot where queue = 'many-q'")
})

t.test('a lane role may call jobs.enqueue_many, and nothing else of the queue', async t => {
  const fraud = new pg.Client({ connectionString: db.roleUrl(db.prefix + 'fraud_ds') })
  await fraud.connect()
  t.teardown(() => fraud.end())
  const { rows } = await fraud.query("select * from jobs.enqueue_many('many-q', 'noop', array['{\"a\":1}'::jsonb, '{\"a\":2}'], array['lane-1', null])")
  t.same(rows.map(r => r.created), [true, true], 'the fraud role enqueued two jobs in one call')
  // The shape a lane's group commit uses (docs/queue-benchmarks.md): the arrays aggregated from rows it wrote.
  const lane = await fraud.query(`with ins as (select * from (values ('a1'), ('a2'), ('a3')) as v(id))
    select e.* from (select array_agg(jsonb_build_object('screeningId', id) order by id) as payloads,
                            array_agg('score:' || id order by id) as keys from ins) a,
         jobs.enqueue_many('many-q', 'fraud.score', a.payloads, a.keys, p_priority => 0, p_delay_ms => 0, p_max_attempts => 10) e`)
  t.same(lane.rows.map(r => [r.ord, r.created]), [[1, true], [2, true], [3, true]], 'from aggregated arrays, in order')
  const none = await fraud.query(`with ins as (select 'x' as id where false)
    select e.* from (select array_agg(jsonb_build_object('screeningId', id)) as payloads, array_agg('score:' || id) as keys from ins) a,
         jobs.enqueue_many('many-q', 'fraud.score', a.payloads, a.keys) e`)
  t.equal(none.rowCount, 0, 'nothing written, nothing returned')
  await t.rejects(fraud.query("select * from jobs.fetch('lane', '{many-q}', '{1}')"), { code: '42501' }, 'but cannot claim')
  await t.rejects(fraud.query('select * from jobs.workers'), { code: '42501' }, 'nor read the queue tables')
  const card = new pg.Client({ connectionString: db.roleUrl(db.prefix + 'card_auth_ds') })
  await card.connect()
  t.teardown(() => card.end())
  await t.rejects(card.query("select * from jobs.enqueue_many('many-q', 'noop', array['{}'::jsonb])"), { code: '42501' }, 'card-auth owns no queue and cannot enqueue')
})
