import t from 'tap'
import { Bulkhead, BulkheadRejected, type Permit } from '../shared/bulkhead.ts'

const reason = async (p: Promise<unknown>): Promise<string> => {
  try { await p; return 'admitted' } catch (e) { return e instanceof BulkheadRejected ? e.reason : `other: ${String(e)}` }
}

t.test('admits up to the permits, queues FIFO up to capacity, rejects the rest at once', async t => {
  const b = new Bulkhead({ permits: 2, queue: 2, queueWaitMs: 1_000 })
  const p1 = await b.acquire()
  const p2 = await b.acquire()
  t.equal(b.active, 2)
  const order: number[] = []
  const w1 = b.acquire().then(p => { order.push(1); return p })
  const w2 = b.acquire().then(p => { order.push(2); return p })
  t.equal(b.queued, 2)
  // Decided at once: the rejection settles before even a 0 ms timer fires (no clock figure).
  const next = new Promise<string>(resolve => setTimeout(resolve, 0, 'a timer fired first'))
  t.equal(await Promise.race([reason(b.acquire()), next]), 'queue_full', 'rejected at once, before any timer')
  p1.release()
  const q1 = await w1
  p2.release()
  const q2 = await w2
  t.same(order, [1, 2], 'waiters get permits in arrival order')
  t.equal(b.active, 2)
  q1.release(); q2.release()
  t.equal(b.active, 0)
  t.equal(b.queued, 0)
})

t.test('a zero queue fails fast', async t => {
  const b = new Bulkhead({ permits: 1, queue: 0, queueWaitMs: 0 })
  const p = await b.acquire()
  t.equal(await reason(b.acquire()), 'fail_fast')
  p.release()
  t.equal(await reason(b.acquire()), 'admitted')
})

t.test('a waiter past its budget is rejected with queue_timeout and leaves the queue', async t => {
  const b = new Bulkhead({ permits: 1, queue: 5, queueWaitMs: 30 })
  const p = await b.acquire()
  const t0 = performance.now()
  t.equal(await reason(b.acquire()), 'queue_timeout')
  t.ok(performance.now() - t0 >= 25, 'waited for the budget')
  t.equal(b.queued, 0)
  p.release()
  t.equal(b.active, 0)
})

t.test('an aborted waiter leaves the queue and takes no permit', async t => {
  const b = new Bulkhead({ permits: 1, queue: 5, queueWaitMs: 5_000 })
  const p = await b.acquire()
  const ac = new AbortController()
  const w = reason(b.acquire(ac.signal))
  t.equal(b.queued, 1)
  ac.abort()
  t.equal(await w, 'aborted')
  t.equal(b.queued, 0)
  p.release()
  t.equal(b.active, 0, 'the released permit did not go to the aborted waiter')
  t.equal(await reason(b.acquire(AbortSignal.abort())), 'aborted')
})

t.test('release is idempotent: a double release never frees a second permit', async t => {
  const b = new Bulkhead({ permits: 2, queue: 0, queueWaitMs: 0 })
  const p = await b.acquire()
  const q = await b.acquire()
  p.release(); p.release(); p.release()
  t.equal(b.active, 1)
  q.release()
  t.equal(b.active, 0)
})

t.test('never exceeds its permits under a random storm', async t => {
  const b = new Bulkhead({ permits: 5, queue: 3, queueWaitMs: 20 })
  let max = 0
  let inside = 0
  const outcomes: Record<string, number> = {}
  await Promise.all(Array.from({ length: 400 }, async (_, i) => {
    await new Promise(r => setTimeout(r, i % 13))
    let permit: Permit
    try { permit = await b.acquire() } catch (e) { const r = (e as BulkheadRejected).reason; outcomes[r] = (outcomes[r] ?? 0) + 1; return }
    inside++
    max = Math.max(max, inside)
    await new Promise(r => setTimeout(r, i % 7))
    inside--
    if (i % 11 === 0) permit.release()
    permit.release()
    outcomes.ok = (outcomes.ok ?? 0) + 1
  }))
  t.ok(max <= 5, `max concurrent ${max} <= 5`)
  t.equal(b.active, 0)
  t.equal(b.queued, 0)
  t.ok((outcomes.ok ?? 0) > 0 && (outcomes.queue_full ?? 0) + (outcomes.queue_timeout ?? 0) > 0, `both admitted and rejected: ${JSON.stringify(outcomes)}`)
})
