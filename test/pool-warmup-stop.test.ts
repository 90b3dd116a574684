// A lane drains its pool on SIGTERM or when its supervisor is gone, and may be
// told to while its pool is still warming up (shared/db/pool.ts warmPool). The
// warm-up holds the clients it opened until all are open, retrying failed
// connects for its start-up budget; an ended pool must end the warm-up, or
// pool.end() waits on clients held for a budget that can only run out (found
// in supervisor-killed: a card-auth killed mid-start took its whole 10 s grace).
// Real PostgreSQL: the lane's role is at its CONNECTION LIMIT, so the warm-up's
// last connects are refused by the server and retried with backoff.
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

t.test('a pool ended while warming: the warm-up stops and end() does not wait for its budget', async t => {
  t.ok(limit > 0, `${role} has a connection limit (${limit})`)
  const budgetMs = 60_000
  const pool = new pg.Pool({ connectionString: url, max: limit + 2 })
  pool.on('error', () => {})
  const started = Date.now()
  let warmedAt = 0
  const warming = warmPool(pool, limit + 2, budgetMs).then(n => { warmedAt = Date.now(); return n })
  // Every connection the role may have is open, and the warm-up is retrying the rest.
  t.ok(await eventually(async () => (await db.connectionsByRole())[short] === limit, 30_000, 50), `the warm-up holds all ${limit} connections the role allows`)
  t.equal(warmedAt, 0, 'and is still warming (its last connects are refused)')

  await pool.end()
  const ended = Date.now()
  const warmed = await warming
  t.equal(warmed, limit, 'the warm-up stops with what it had opened')
  t.ok(ended - started < budgetMs / 2, `end() resolved ${ended - started} ms after the warm-up began, far inside its ${budgetMs} ms budget`)
  t.equal(pool.totalCount, 0, 'no client is left')
  t.ok(await eventually(async () => !(short in (await db.connectionsByRole())), 10_000, 50), 'and the server holds no connection of the role')
})
