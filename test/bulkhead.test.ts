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
    await new Promise(resolve => setTimeout(resolve, i % 13))
    let permit: Permit
    try {
      permit = await b.acquire()
    } catch (e) {
      const r = (e as BulkheadRejected).reason
      outcomes[r] = (outcomes[r] ?? 0) + 1
      return
    }
    inside++
    max = Math.max(max, inside)
    await new Promise(resolve => setTimeout(resolve, i % 7))
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

// Fairness between tenants (merchants): a released permit goes to the waiting
// tenant holding the fewest, round-robin among equals, FIFO within one; a full
// queue sheds the tenant with the most.
/** The rejection a refused acquire() ends with (a permit would fail the test). */
const refusal = async (p: Promise<Permit>): Promise<BulkheadRejected> => {
  try { await p } catch (e) { if (e instanceof BulkheadRejected) return e; throw e }
  throw new Error('admitted, expected a refusal')
}
const settle = async (): Promise<void> => { for (let i = 0; i < 4; i++) await Promise.resolve() }

t.test('waiters are served round-robin across tenants, FIFO within one', async t => {
  const b = new Bulkhead({ permits: 1, queue: 6, queueWaitMs: 10_000 })
  const held = [await b.acquire(undefined, 'hot')]
  const served: string[] = []
  const wait = (tenant: string, n: number): void => { void b.acquire(undefined, tenant).then(p => { served.push(`${tenant}#${n}`); held.push(p) }) }
  wait('hot', 1); wait('hot', 2); wait('hot', 3); wait('hot', 4); wait('q1', 1); wait('q2', 1)
  t.equal(b.queued, 6)
  t.equal(b.tenantsInFlight, 3)
  for (let i = 0; i < 7; i++) { held.shift()!.release(); await settle() }
  t.same(served, ['hot#1', 'q1#1', 'q2#1', 'hot#2', 'hot#3', 'hot#4'], 'one turn each, then the hot tenant\'s rest in its own order')
  t.equal(b.active, 0)
  t.equal(b.tenantsInFlight, 0, 'nothing kept for tenants with nothing in flight')
})

t.test('a full queue sheds the tenant with the most; a freed permit goes to the one holding fewest', async t => {
  const b = new Bulkhead({ permits: 2, queue: 3, queueWaitMs: 10_000 })
  const held = [await b.acquire(undefined, 'hot'), await b.acquire(undefined, 'hot')]
  const hot = [1, 2, 3].map(() => reason(b.acquire(undefined, 'hot')))
  t.equal(b.queued, 3)
  t.equal(await reason(b.acquire(undefined, 'hot')), 'queue_full', 'the hot tenant\'s own arrival is refused at once')
  let quietIn = false
  const quiet = b.acquire(undefined, 'quiet').then(p => { quietIn = true; return p })
  t.equal(b.queued, 3, 'the quiet arrival took a place')
  t.equal(b.displaced, 1)
  t.equal(await hot[2], 'queue_full', 'the hot tenant\'s newest waiter gave it up')
  held[0]!.release()
  await settle()
  t.ok(quietIn, 'the freed permit went to the quiet tenant, which held none, though it came last')
  held[1]!.release(); (await quiet).release()
  for (const x of hot.slice(0, 2)) t.equal(await x, 'admitted')
})

t.test('equal loads do not displace each other', async t => {
  const b = new Bulkhead({ permits: 1, queue: 1, queueWaitMs: 10_000 })
  const a = await b.acquire(undefined, 'a')
  const waiting = reason(b.acquire(undefined, 'b'))
  t.equal(await reason(b.acquire(undefined, 'c')), 'queue_full', 'a tenant with one place keeps it against one with none')
  t.equal(b.displaced, 0)
  a.release()
  t.equal(await waiting, 'admitted')
})

t.test('random arrivals and releases: limits hold, and a waiting tenant is passed only by tenants holding no more than it', async t => {
  let seed = 42
  const random = (): number => { seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31; return seed / 2 ** 31 }
  let checked = 0
  for (let round = 0; round < 20; round++) {
    const permits = 1 + Math.floor(random() * 4)
    const queue = 1 + Math.floor(random() * 6)
    // Every other round with a reserve: the guarantee must not break the limits or the order.
    const reserve = round % 2 === 1 ? Math.floor(permits / 2) : 0
    const b = new Bulkhead({ permits, queue, queueWaitMs: 60_000, reserve })
    const held: Array<{ tenant: string, p: Permit }> = []
    const holding = new Map<string, number>()
    const waiting = new Map<string, number>()
    let over = 0
    let unfair = 0
    for (let step = 0; step < 300; step++) {
      if (random() < 0.55) {
        const tenant = random() < 0.6 ? 'hot' : `m${Math.floor(random() * 5)}`
        let queued = false
        let settled = false
        void b.acquire(undefined, tenant).then(p => {
          settled = true
          if (queued) {
            waiting.set(tenant, waiting.get(tenant)! - 1)
            // Every other tenant still waiting holds at least as many permits as this one did.
            checked++
            const mine = holding.get(tenant) ?? 0
            for (const [other, n] of waiting) {
              if (other !== tenant && n > 0 && (holding.get(other) ?? 0) < mine) unfair++
            }
          }
          holding.set(tenant, (holding.get(tenant) ?? 0) + 1)
          held.push({ tenant, p })
        }, () => { settled = true; if (queued) waiting.set(tenant, waiting.get(tenant)! - 1) })
        await settle()
        if (!settled) { queued = true; waiting.set(tenant, (waiting.get(tenant) ?? 0) + 1) }
      } else if (held.length > 0) {
        const [h] = held.splice(Math.floor(random() * held.length), 1)
        holding.set(h!.tenant, holding.get(h!.tenant)! - 1)
        h!.p.release()
        await settle()
      }
      if (b.active > permits || b.queued > queue) over++
    }
    t.equal(over, 0, `round ${round}: never more than ${permits} permits or ${queue} waiting`)
    t.equal(unfair, 0, `round ${round}: no permit went past a waiting tenant that held fewer`)
    while (held.length) { held.pop()!.p.release(); await settle() }
    t.equal(b.tenantsInFlight, 0, `round ${round}: no tenant state left`)
  }
  t.ok(checked > 100, `${checked} handovers checked`)
})

t.test('a refusal says where its tenant stood when others were in flight', async t => {
  const b = new Bulkhead({ permits: 4, queue: 1, queueWaitMs: 10_000 })
  const held = [await b.acquire(undefined, 'hot'), await b.acquire(undefined, 'hot'), await b.acquire(undefined, 'hot'), await b.acquire(undefined, 'quiet')]
  const waiting = refusal(b.acquire(undefined, 'hot'))
  const refused = await refusal(b.acquire(undefined, 'hot'))
  t.equal(refused.reason, 'queue_full')
  t.same(refused.fair, { tenant: 'hot', held: 3, queued: 1, share: 2, tenants: 2, displaced: false }, 'its load and its share of 4 permits between 2 tenants')
  const quiet2 = b.acquire(undefined, 'quiet2')
  const displaced = await waiting
  t.same(displaced.fair, { tenant: 'hot', held: 3, queued: 1, share: 4 / 3, tenants: 3, displaced: true }, 'the waiter that gave its place up is told so')
  t.equal(b.fairShed, 2, 'both counted as shed by fairness')
  t.same(b.top(2).map(x => [x.tenant, x.held, x.queued]), [['hot', 3, 0], ['quiet', 1, 0]], 'top tenants by permits held')
  held.pop()!.release()
  ;(await quiet2).release()
  for (const p of held) p.release()
  t.equal(b.tenantsInFlight, 0)

  const alone = new Bulkhead({ permits: 1, queue: 1, queueWaitMs: 10_000 })
  const p = await alone.acquire(undefined, 'only')
  void alone.acquire(undefined, 'only').then(q => q.release())
  t.equal((await refusal(alone.acquire(undefined, 'only'))).fair, undefined, 'alone, a refusal is the plain bulkhead\'s')
  t.equal(alone.fairShed, 0)
  p.release()
})

t.test('weights scale a tenant\'s share: who is served, who is displaced', async t => {
  const b = new Bulkhead({ permits: 4, queue: 2, queueWaitMs: 10_000, weight: m => m === 'gold' ? 2 : 1 })
  const held = [await b.acquire(undefined, 'gold'), await b.acquire(undefined, 'gold'), await b.acquire(undefined, 'plain')]
  const x = await b.acquire(undefined, 'x')
  const order: string[] = []
  const gold = b.acquire(undefined, 'gold').then(p => { order.push('gold'); return p })
  const plain = b.acquire(undefined, 'plain').then(p => { order.push('plain'); return p })
  x.release()
  await settle()
  t.same(order, ['gold'], 'gold\'s 2 permits at weight 2 count as plain\'s 1: equal, and gold came first in turn')
  for (const p of held) p.release()
  await settle()
  ;(await plain).release(); (await gold).release()
  t.equal(b.tenantsInFlight, 0)

  const d = new Bulkhead({ permits: 2, queue: 2, queueWaitMs: 10_000, weight: m => m === 'gold' ? 2 : 1 })
  const hs = [await d.acquire(undefined, 'gold'), await d.acquire(undefined, 'plain')]
  const golds = [d.acquire(undefined, 'gold'), d.acquire(undefined, 'gold')]
  t.equal(await reason(d.acquire(undefined, 'plain')), 'queue_full', 'gold\'s 3 at weight 2 are fewer per weight than plain\'s 2 would be: plain displaces nothing')
  t.equal(d.displaced, 0)
  for (const p of hs) p.release()
  for (const g of golds) (await g).release()
})

t.test('with no queue, the reserve keeps the last permits from a tenant at its share', async t => {
  const b = new Bulkhead({ permits: 6, queue: 0, queueWaitMs: 0, reserve: 2 })
  const hog: Permit[] = []
  for (let i = 0; i < 6; i++) hog.push(await b.acquire(undefined, 'hog'))
  t.equal(b.active, 6, 'alone, the hog may take every permit')
  for (const p of hog.splice(2)) p.release()
  const quiet = await b.acquire(undefined, 'quiet')
  hog.push(await b.acquire(undefined, 'hog'))
  t.equal(b.active, 4, 'above the reserve, the hog still takes free permits')
  const refused = await refusal(b.acquire(undefined, 'hog'))
  t.equal(refused.reason, 'fail_fast', 'the last 2 are kept from the hog: it holds 3, its share of 6 between 2 is 3')
  t.same(refused.fair, { tenant: 'hog', held: 3, queued: 0, share: 3, tenants: 2, displaced: false })
  const quiet2 = await b.acquire(undefined, 'quiet')
  const late = await b.acquire(undefined, 'late')
  t.equal(b.active, 6, 'the reserve went to tenants under their share')
  t.equal(await reason(b.acquire(undefined, 'late2')), 'fail_fast', 'a full lane still fails fast')
  for (const p of [quiet, quiet2, late, ...hog]) p.release()
  t.equal(b.tenantsInFlight, 0)
})

t.test('with a queue, the reserve keeps the hog waiting while others take the last permits', async t => {
  const b = new Bulkhead({ permits: 4, queue: 4, queueWaitMs: 10_000, reserve: 2 })
  const hog = [await b.acquire(undefined, 'hog'), await b.acquire(undefined, 'hog')]
  const quiet = await b.acquire(undefined, 'quiet')
  let hogIn = false
  const hogWaits = b.acquire(undefined, 'hog').then(p => { hogIn = true; return p })
  t.same([b.active, b.queued], [3, 1], 'the hog holds its share (2 of 4 between 2): it waits beside a free permit')
  const quiet2 = await b.acquire(undefined, 'quiet2')
  t.same([b.active, b.queued], [4, 1], 'another merchant takes the free permit past it')
  quiet.release()
  await settle()
  t.notOk(hogIn, 'with quiet2 in flight the hog still holds its share: the freed permit stays free')
  quiet2.release()
  await settle()
  t.ok(hogIn, 'alone again, the hog gets it')
  for (const p of [...hog, await hogWaits]) p.release()
  t.same([b.active, b.queued, b.tenantsInFlight], [0, 0, 0])
})

t.test('a waiter the reserve kept past its budget is refused for its share', async t => {
  const b = new Bulkhead({ permits: 4, queue: 2, queueWaitMs: 20, reserve: 1 })
  const hog = [await b.acquire(undefined, 'hog'), await b.acquire(undefined, 'hog')]
  const other = await b.acquire(undefined, 'other')
  const kept = await refusal(b.acquire(undefined, 'hog'))
  t.equal(kept.reason, 'queue_timeout', 'it waited beside the free permit until its budget ran out')
  t.same(kept.fair, { tenant: 'hog', held: 2, queued: 1, share: 2, tenants: 2, displaced: false })
  t.equal(b.fairShed, 1)
  const full = new Bulkhead({ permits: 1, queue: 1, queueWaitMs: 20, reserve: 0 })
  const p = await full.acquire(undefined, 'a')
  t.equal((await refusal(full.acquire(undefined, 'b'))).fair, undefined, 'a plain wait past the budget, with no permit free, says nothing of shares')
  p.release()
  for (const x of [...hog, other]) x.release()
})

t.test('top tenants and the count in flight stay bounded by what is in flight', async t => {
  const b = new Bulkhead({ permits: 10_000, queue: 10, queueWaitMs: 10_000 })
  const held: Permit[] = []
  for (let i = 0; i < 10_000; i++) held.push(await b.acquire(undefined, `m${i % 5_000}`))
  t.equal(b.tenantsInFlight, 5_000)
  t.equal(b.top(5).length, 5)
  t.same(b.top(1)[0]!.held, 2)
  for (const p of held) p.release()
  t.equal(b.tenantsInFlight, 0)
  t.same(b.top(5), [])
  t.ok(b.tenantsKept <= 64, `idle merchants' state swept (${b.tenantsKept} kept)`)
  const one = await b.acquire(undefined, 'steady')
  for (let i = 0; i < 1_000; i++) (await b.acquire(undefined, `passing${i}`)).release()
  t.ok(b.tenantsKept <= 66, `merchants that come and go one at a time leave at most 64 idle entries beside the live one (${b.tenantsKept})`)
  one.release()
})
