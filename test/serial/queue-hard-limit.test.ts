// The hard, fleet-wide queue bulkhead: 4 worker processes with 20 local slots
// each hammer a queue with MaxWorkers 3 (slow jobs) and an unlimited queue (fast
// jobs). The slow queue never has more than 3 active jobs — measured exactly from
// the claim and finish timestamps, and by a monitor polling PostgreSQL — and the
// fast queue is not starved by it (the noisy-neighbour case).
import t from 'tap'
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
