// The supervisor sets each lower-priority role's PostgreSQL backends to its
// lane's nice (services/supervisor/backend-priorities.ts), on the test's own
// local server: a backend that connects later is caught by the next sweep, a
// P0 role's is left at 0, and stopping leaves nothing connected.
import os from 'node:os'
import pg from 'pg'
import t from 'tap'
import { laneLimits } from '../shared/lanes.ts'
import { startBackendPriorities } from '../services/supervisor/backend-priorities.ts'
import { testDatabase } from './helpers/db.ts'
import { eventually } from './helpers/http.ts'

const db = await testDatabase(t)

t.test('each role\'s backends get its nice, the P0 role\'s stay at 0', async t => {
  const tax = laneLimits('tax', db.env).db.role
  const card = laneLimits('card-auth', db.env).db.role
  const open = async (role: string): Promise<{ c: pg.Client, pid: number }> => {
    const c = new pg.Client({ connectionString: db.roleUrl(role) })
    await c.connect()
    t.teardown(() => c.end())
    const { rows } = await c.query<{ pid: number }>('select pg_backend_pid() as pid')
    return { c, pid: rows[0]!.pid }
  }
  const before = await open(tax)
  const cardConn = await open(card)
  const logs: string[] = []
  const bp = startBackendPriorities({
    databaseUrl: db.superUrl, niceByRole: { [tax]: 10, [card]: 0 }, everyMs: 100, log: m => logs.push(m),
  })
  t.teardown(() => bp.stop())
  t.ok(await eventually(async () => os.getPriority(before.pid) === 10, 10_000, 50), `the tax role's backend at nice 10 (${os.getPriority(before.pid)})`)
  const after = await open(tax)
  t.ok(await eventually(async () => os.getPriority(after.pid) === 10, 10_000, 50), 'a backend that connected later too')
  t.equal(os.getPriority(cardConn.pid), 0, 'the P0 role\'s backend stays at 0')
  t.same(logs, [], 'nothing to warn about')
  await bp.stop()
  const left = await db.query<{ n: string }>("select count(*) as n from pg_stat_activity where application_name = 'watertight-supervisor' and datname = current_database()")
  t.equal(Number(left[0]!.n), 0, 'stopped: its connection is closed')
})
