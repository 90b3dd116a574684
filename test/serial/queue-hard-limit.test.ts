// The hard, fleet-wide queue bulkhead: 4 worker processes with 20 local slots
// each hammer a queue with MaxWorkers 3 (slow jobs) and an unlimited queue (fast
// jobs). The slow queue never has more than 3 active jobs — measured exactly from
// the claim and finish timestamps, and by a monitor polling PostgreSQL — and the
// fast queue is not starved by it (the noisy-neighbour case). Then the same at
// full speed through the batched paths (claim+start+complete in one call, fair
// shares under a shared lock, growth under an exclusive one), across a limit
// lowered and raised at run time.
import t from 'tap'
import { updateQueue } from '../../shared/queue/admin.ts'
import { fetchJobs, type Done } from '../../shared/queue/claim.ts'
import { enqueueMany as enqueueJobs } from '../../shared/queue/enqueue.ts'
import { workerGone, workerSeen } from '../../shared/queue/workers.ts'
import { testDatabase } from '../helpers/db.ts'
import { eventually, sleep } from '../helpers/http.ts'
import { counts, createQueue, enqueueMany, maxConcurrency, startWorker } from '../helpers/queue.ts'

// 4 workers share jobs_ds: 4 x (4 pooled + 1 LISTEN) connections within a role limit of 20.
const db = await testDatabase(t, { JOBS_POOL_MAX: '20' })
await createQueue(db, 'slow-pdf', 3)
await createQueue(db, 'fast-sms', null)

t.test('MaxWorkers 3 holds across 4 workers x 20 slots; the unlimited queue runs beside it', async t => {
  await enqueueMany(db, 'slow-pdf', 'sleep', 45, { ms: 120 })
  await enqueueMany(db, 'fast-sms', 'sleep', 400, { ms: 5 })
  let monitorMax = 0
  let monitoring = true
  const monitor = (async () => {
    while (monitoring) {
      const [r] = await db.query<{ n: number }>("select count(*)::int as n from jobs.jobs_hot where queue = 'slow-pdf' and status in ('fetched', 'processing')")
      monitorMax = Math.max(monitorMax, r!.n)
      await sleep(5)
    }
  })()
  const t0 = Date.now()
  await Promise.all([0, 1, 2, 3].map(i => startWorker(t, db, ['slow-pdf', 'fast-sms'], { WORKER_SLOTS: '20', JOBS_POOL_MAX: '20', WORKER_REPLICAS: '4' }, `worker-${i}`)))
  const fastDone = await eventually(async () => (await counts(db, 'fast-sms')).archive === 400, 60_000, 50)
  const fastMs = Date.now() - t0
  const slowDone = await eventually(async () => (await counts(db, 'slow-pdf')).archive === 45, 60_000, 50)
  const slowMs = Date.now() - t0
  monitoring = false
  await monitor
  t.ok(fastDone && slowDone, 'every job finished')

  const slowMax = await maxConcurrency(db, 'slow-pdf')
  const fastMax = await maxConcurrency(db, 'fast-sms')
  t.comment(`slow-pdf max concurrency ${slowMax} (monitor saw ${monitorMax}); fast-sms max ${fastMax}; fast done at ${fastMs} ms, slow at ${slowMs} ms`)
  t.ok(slowMax <= 3, `never more than 3 slow jobs at once (exact: ${slowMax})`)
  t.equal(slowMax, 3, 'and the limit was used in full')
  t.ok(monitorMax <= 3, `the monitor never saw more than 3 (${monitorMax})`)
  t.ok(fastMax > 3, `the unlimited queue ran wider (${fastMax} at once)`)
  t.ok(fastMs < slowMs, 'the fast queue finished first: slow jobs did not hold it back')
  const [workers] = await db.query<{ n: number }>("select count(distinct worker_id)::int as n from jobs.jobs_archive where queue = 'slow-pdf'")
  t.ok(workers!.n >= 2, `slow jobs were spread over ${workers!.n} worker processes`)
  t.same(await counts(db, 'slow-pdf'), { hot: 0, archive: 45, dead: 0 }, 'nothing left in jobs_hot')
})

t.test('at full speed too: batched claims of 2 worker processes and 3 library claimers, MaxWorkers 10 -> 4 -> 10', async t => {
  const N = 3_000
  await createQueue(db, 'burst', 10)
  await Promise.all([0, 1].map(i => startWorker(t, db, ['burst'], { WORKER_SLOTS: '20', JOBS_POOL_MAX: '20', WORKER_REPLICAS: '4' }, `burst-worker-${i}`)))
  await enqueueJobs(db.pool, 'burst', 'noop', Array.from({ length: N }, (_, i) => ({ payload: { i } })))
  // Two claimers with a share (registered like a worker) and one without: the
  // shared-lock path, the exclusive one, and growth, all at once. The one
  // without a share takes the exclusive lock on every call but only room no
  // live worker is dealt (migration 0011), here none: it must not starve them.
  const ids = ['lib-a', 'lib-b', 'lib-unregistered']
  for (const id of ids.slice(0, 2)) await workerSeen(db.pool, id, { burst: 10 }, 600_000)
  t.teardown(async () => { for (const id of ids) await workerGone(db.pool, id).catch(() => {}) })
  const batches: number[] = []
  let running = true
  const claimers = ids.map(async id => {
    let done: Done[] = []
    while (running || done.length > 0) {
      const r = await fetchJobs(db.pool, { workerId: id, slots: { burst: running ? 10 : 0 }, done })
      if (r.jobs.length > 0) batches.push(r.jobs.length)
      done = r.jobs.map(j => ({ id: j.id, lease: j.lease! }))
      await sleep(done.length > 0 ? 1 : 3)
    }
  })
  const archived = async (): Promise<number> => (await counts(db, 'burst')).archive
  t.ok(await eventually(async () => await archived() >= N / 4, 60_000, 10), 'a quarter done at MaxWorkers 10')
  await updateQueue(db.pool, 'burst', { maxWorkers: 4 })
  const [{ lowered }] = await db.query<{ lowered: string }>('select (extract(epoch from now()) * 1000000)::bigint::text as lowered') as [{ lowered: string }]
  const at4 = await archived()
  t.ok(await eventually(async () => await archived() >= at4 + 300, 60_000, 10), '300 more done at MaxWorkers 4')
  const [{ raised }] = await db.query<{ raised: string }>('select (extract(epoch from now()) * 1000000)::bigint::text as raised') as [{ raised: string }]
  await updateQueue(db.pool, 'burst', { maxWorkers: 10 })
  t.ok(await eventually(async () => await archived() === N, 120_000, 20), 'every job done')
  running = false
  await Promise.all(claimers)

  const max = await maxConcurrency(db, 'burst')
  t.ok(max <= 10, `never more than 10 at once (exact: ${max})`)
  t.ok(max > 4, 'and wider than 4 while the limit was 10')
  // At MaxWorkers 4: from when the jobs claimed before the change had all finished, until the limit went back up.
  const rows = await db.query<{ s: string, e: string }>(
    `select (extract(epoch from fetched_at) * 1000000)::bigint::text as s, (extract(epoch from finished_at) * 1000000)::bigint::text as e
       from jobs.jobs_archive where queue = 'burst'`)
  const spans = rows.map(r => [Number(r.s), Number(r.e)] as const)
  const settled = Math.max(...spans.filter(([s]) => s < Number(lowered)).map(([, e]) => e))
  const window = spans
    .filter(([s, e]) => e > settled && s < Number(raised))
    .map(([s, e]) => [Math.max(s, settled), Math.min(e, Number(raised))] as const)
  t.ok(window.length > 0, `jobs ran at MaxWorkers 4 (${window.length})`)
  t.ok(overlap(window) <= 4, `never more than 4 at once once the limit was 4 (${overlap(window)})`)
  t.same(await counts(db, 'burst'), { hot: 0, archive: N, dead: 0 }, 'every job archived once, none left')
  const [{ again }] = await db.query<{ again: number }>("select count(*)::int as again from jobs.jobs_archive where queue = 'burst' and attempts <> 1") as [{ again: number }]
  t.equal(again, 0, 'no job claimed twice')
  const by = Object.fromEntries((await db.query<{ worker_id: string, n: number }>(
    "select worker_id, count(*)::int as n from jobs.jobs_archive where queue = 'burst' group by worker_id")).map(r => [r.worker_id, r.n]))
  t.ok(by['lib-a']! > 0 && by['lib-b']! > 0, `both claimers with a share ran jobs (${by['lib-a']}, ${by['lib-b']})`)
  t.equal(Object.keys(by).filter(w => !ids.includes(w)).length, 2, `both worker processes ran jobs (${JSON.stringify(by)})`)
  t.ok(Math.max(...batches) > 1, `claims came in batches (largest ${Math.max(...batches)})`)
})

function overlap (spans: ReadonlyArray<readonly [number, number]>): number {
  const ev = spans.flatMap(([s, e]) => [[s, 1], [e, -1]] as const).sort((a, b) => a[0] - b[0] || a[1] - b[1])
  let cur = 0; let max = 0
  for (const [, d] of ev) { cur += d; max = Math.max(max, cur) }
  return max
}
