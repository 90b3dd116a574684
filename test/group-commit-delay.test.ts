// The group-commit writer's delay under load (shared/db/group-commit.ts
// `delayMs`, card-auth's CARD_AUTH_COMMIT_DELAY_MS): once a batch held four
// items or more, the next waits until its oldest item has waited `delayMs`, so
// an item arriving meanwhile goes in the same commit; after a smaller batch
// nothing waits; a request stopped while it waits leaves at once. Shown by which
// items each commit held, on a real PostgreSQL.
import t from 'tap'
import { GroupCommit } from '../shared/db/group-commit.ts'
import { testDatabase } from './helpers/db.ts'

const db = await testDatabase(t)
await db.query('create table public.gc_probe (item text primary key)')

/** A writer whose every commit's items are recorded, in order. */
function writer (delayMs: number) {
  const batches: string[][] = []
  const w = new GroupCommit<string, string>({
    name: `probe-${delayMs}`,
    applicationName: 'watertight-test',
    databaseUrl: db.superUrl,
    log: { warn: () => {} },
    delayMs,
    async write (c, items) {
      await c.query('insert into public.gc_probe select unnest($1::text[])', [items])
      batches.push([...items])
      return [...items]
    },
  })
  t.teardown(() => w.close())
  return { w, batches }
}

const later = (ms: number): Promise<void> => new Promise(resolve => setTimeout(resolve, ms))
// The delay is far longer than the gap between two submits (20 ms), so a busy host does not blur them.
const DELAY = 400

/** Four submitted in one turn: one batch of four, which turns the delay on for the next. */
const four = (w: GroupCommit<string, string>, p: string) => Promise.all([1, 2, 3, 4].map(i => w.submit(`${p}${i}`)))

t.test('after a batch of four, the next item waits and the one that arrives meanwhile joins its commit', async t => {
  const { w, batches } = writer(DELAY)
  await four(w, 'a')
  const c = w.submit('a5')
  await later(20)
  const d = w.submit('a6')
  t.same(await Promise.all([c, d]), ['a5', 'a6'])
  t.same(batches, [['a1', 'a2', 'a3', 'a4'], ['a5', 'a6']], 'the first four at once (nothing before them), the next two in one commit')
  t.same(w.stats, { batches: 2, items: 6, failures: 0 })
})

t.test('without the delay the same arrivals are two commits', async t => {
  const { w, batches } = writer(0)
  await four(w, 'b')
  const c = w.submit('b5')
  await later(20)
  const d = w.submit('b6')
  await Promise.all([c, d])
  t.same(batches, [['b1', 'b2', 'b3', 'b4'], ['b5'], ['b6']])
})

t.test('after a batch of three, or of one, nothing waits', async t => {
  const { w, batches } = writer(DELAY)
  await Promise.all([w.submit('c1'), w.submit('c2'), w.submit('c3')])
  const e = w.submit('c4') // after a batch of three: at once
  await later(20)
  await Promise.all([e, w.submit('c5')])
  await four(w, 'c-')
  await w.submit('c6') // after a batch of four: waits, alone
  const f = w.submit('c7') // after a batch of one: at once
  await later(20)
  await Promise.all([f, w.submit('c8')])
  t.same(batches, [['c1', 'c2', 'c3'], ['c4'], ['c5'], ['c-1', 'c-2', 'c-3', 'c-4'], ['c6'], ['c7'], ['c8']], 'c4 did not wait for c5, nor c7 for c8')
})

t.test('an item stopped while it waits leaves at once and is not written; the other is', async t => {
  const { w, batches } = writer(DELAY)
  await four(w, 'd')
  const stop = new AbortController()
  const gone = w.submit('d5', stop.signal)
  const kept = w.submit('d6')
  let keptDone = false
  void kept.then(() => { keptDone = true })
  await later(20)
  stop.abort(new Error('deadline'))
  await t.rejects(gone, { message: 'deadline' })
  t.notOk(keptDone, 'rejected before the batch it waited for was written')
  t.equal(await kept, 'd6')
  t.same(batches.at(-1), ['d6'])
  t.same((await db.query<{ item: string }>("select item from public.gc_probe where item like 'd%' order by item")).map(r => r.item), ['d1', 'd2', 'd3', 'd4', 'd6'])
})
