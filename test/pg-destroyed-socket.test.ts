// What shared/db/destroy-socket.ts relies on in pg, which has no public call
// for it: destroying a client's socket fails the query it has in flight at once
// (a server that never answers cannot hold it), the client's 'error' does not
// crash the process, and a pool drops such a client when it comes back. On a
// real PostgreSQL.
import pg from 'pg'
import t from 'tap'
import { destroySocket } from '../shared/db/destroy-socket.ts'
import { testDatabase } from './helpers/db.ts'

const db = await testDatabase(t)
const HANG = 'select pg_sleep(30)'

t.test("a pool's checked-out client: its query fails at once, and the pool drops it", async t => {
  const pool = new pg.Pool({ connectionString: db.superUrl, max: 1 })
  t.teardown(() => pool.end())
  const c = await pool.connect()
  const pending = c.query(HANG)
  const t0 = performance.now()
  destroySocket(c)
  await t.rejects(pending, 'the query in flight rejects')
  t.ok(performance.now() - t0 < 2_000, 'at once, not when the server answers')
  c.release()
  t.equal(pool.totalCount, 0, 'the pool dropped the client')
  t.same((await pool.query<{ ok: number }>('select 1 as ok')).rows, [{ ok: 1 }], 'and opens a new one')
})

t.test('a lone client: its query fails, and it is unusable', async t => {
  const c = new pg.Client({ connectionString: db.superUrl })
  await c.connect()
  const pending = c.query(HANG)
  destroySocket(c)
  await t.rejects(pending, 'the query in flight rejects')
  await t.rejects(c.query('select 1'), 'a later query fails too')
})
