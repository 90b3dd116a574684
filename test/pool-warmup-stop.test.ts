// A lane's pool warm-up (shared/db/pool.ts warmPool) holds the clients it
// opened until all are open, retrying failed connects for its start-up budget.
// A role at its CONNECTION LIMIT ends it at once: retrying then would hold
// every connection of the pool for the whole budget, so requests, the replica
// heartbeat and pool.end() would wait on it (found in supervisor-killed: a
// card-auth killed mid-start took its whole 10 s grace; and with two replicas
// starting together, a heartbeat starved until its row aged out). An ended pool
// ends it too. Real PostgreSQL: the lane's role at its limit refuses the last
// connects.
import pg from 'pg'
import t from 'tap'
import { warmPool } from '../shared/db/pool.ts'
import { testDatabase } from './helpers/db.ts'
import { eventually } from './helpers/http.ts'

const db = await testDatabase(t)
const url = db.laneUrl('fraud')
const role = new URL(url).username
const short = role.slice(db.prefix.length) // connectionsByRole() names roles without the test's prefix
const limit = Number((await db.query('select rolconnlimit as limit from pg_roles where rolname = $1', [role]))[0]?.limit)

t.test('a role at its limit ends the warm-up at once: what it opened goes back to the pool, and end() is quick', async t => {
  t.ok(limit > 0, `${role} has a connection limit (${limit})`)
  const budgetMs = 60_000
  const pool = new pg.Pool({ connectionString: url, max: limit + 2 })
  pool.on('error', () => {})
  const started = Date.now()
  const warmed = await warmPool(pool, limit + 2, budgetMs)
  const done = Date.now()
  t.equal(warmed, limit, `it opened the ${limit} connections the role allows`)
  t.ok(done - started < budgetMs / 2, `and stopped at the first refusal, ${done - started} ms after it began, far inside its ${budgetMs} ms budget`)
  t.equal(pool.idleCount, limit, 'none is held: all idle in the pool, for requests (and the replica heartbeat) to use')
  await pool.end()
  t.equal(pool.totalCount, 0, 'no client is left')
  t.ok(await eventually(async () => !(short in (await db.connectionsByRole())), 10_000, 50), 'and the server holds no connection of the role')
})
