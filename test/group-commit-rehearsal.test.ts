// A group-commit writer's rehearsals (shared/db/group-commit.ts `rehearsal`,
// the gateway's warm-up through card-auth): items marked so run the same write
// inside a transaction that is rolled back, and never share a batch with real
// writes, so a rehearsal can neither write nor undo a real one. Shown by what
// each commit held and what the table keeps, on a real PostgreSQL.
import t from 'tap'
import { GroupCommit } from '../shared/db/group-commit.ts'
import { testDatabase } from './helpers/db.ts'

const db = await testDatabase(t)
await db.query('create table public.gc_rehearsal (item text primary key)')

const batches: string[][] = []
const w = new GroupCommit<string, string>({
  name: 'rehearsal-probe',
  applicationName: 'watertight-test',
  databaseUrl: db.superUrl,
  log: { warn: () => {} },
  rehearsal: item => item.startsWith('r'),
  async write (c, items) {
    await c.query('insert into public.gc_rehearsal select unnest($1::text[])', [items])
    batches.push([...items])
    return [...items]
  },
})
t.teardown(() => w.close())

t.test('rehearsals run the write and leave nothing; real writes beside them are kept', async t => {
  // One turn of the event loop: without the rule these would be one batch.
  const out = await Promise.all(['w1', 'r1', 'r2', 'w2', 'w3', 'r3'].map(x => w.submit(x)))
  t.same(out, ['w1', 'r1', 'r2', 'w2', 'w3', 'r3'], 'every item answered with its output')
  t.same(batches, [['w1'], ['r1', 'r2'], ['w2', 'w3'], ['r3']], 'runs of one kind, in order, each its own batch')
  const rows = await db.query<{ item: string }>('select item from public.gc_rehearsal order by item')
  t.same(rows.map(r => r.item), ['w1', 'w2', 'w3'], 'only the real writes are in the table')
  // The same rehearsal again succeeds (nothing of it was kept); the same real write again fails (it was).
  t.same(await w.submit('r1'), 'r1', 'a rehearsal again: nothing of it was kept')
  await t.rejects(w.submit('w1'), 'a real write again: its row is there')
  t.same((await db.query<{ n: number }>('select count(*)::int as n from public.gc_rehearsal'))[0]!.n, 3, 'still three rows')
})
