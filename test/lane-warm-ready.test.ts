// A lane replica reports ready only once it is warm: its pool opened as far as
// it can and its hot path run once (shared/lane-kit/warm-up.ts), so the
// gateway's checks and a readiness probe send a new replica traffic only then.
// The test holds all but one of the role's connections: the lane starts and
// listens on that one, and stays "warming" (alive, not ready) while its
// pool cannot open; once the test lets go, it warms and turns ready.
import pg from 'pg'
import t from 'tap'
import { laneLimits } from '../shared/lanes.ts'
import { testDatabase } from './helpers/db.ts'
import { call, eventually } from './helpers/http.ts'
import { laneEnv, startProcess } from './helpers/procs.ts'

const db = await testDatabase(t)
const role = laneLimits('fraud', db.env).db.role

t.test('warming: alive, not ready, until the pool is open and the hot path ran', async t => {
  const [row] = await db.query<{ limit: number }>('select rolconnlimit as limit from pg_roles where rolname = $1', [role])
  const held: pg.Client[] = []
  const release = async (): Promise<void> => { await Promise.all(held.splice(0).map(c => c.end().catch(() => {}))) }
  t.teardown(release)
  for (let i = 0; i < row!.limit - 1; i++) {
    const c = new pg.Client({ connectionString: db.roleUrl(role), application_name: 'warm-test-holder' })
    await c.connect()
    held.push(c)
  }
  const lane = await startProcess(t, 'fraud', 'services/fraud/main.ts', laneEnv('fraud', db.env, db.roleUrl(role)))
  const ready = await call(lane.url + '/health/ready')
  t.equal(ready.status, 503, 'not ready while its pool cannot open')
  t.match(ready.body, { status: 'unready', warming: true, db: 'ok' }, 'and says it is warming')
  t.equal((await call(lane.url + '/health/live')).status, 200, 'alive')
  t.notOk(lane.log.some(l => l.includes('warm: ready')), 'not warm yet')

  await release()
  t.ok(await eventually(async () => (await call(lane.url + '/health/ready')).status === 200, 30_000, 200), 'ready once the pool could open')
  // Its log line is written before it turns ready; its pipe may bring it a moment later.
  const warm = await eventually(async () => lane.log.map(l => { try { return JSON.parse(l) as { msg?: string, status?: number, hotPath?: string } } catch { return {} } }).find(o => o.msg === 'warm: ready'), 10_000, 50)
  t.match(warm, { hotPath: /^\/v1\/fraud\/screenings\//, status: 404 }, 'after its hot path ran once (an id no row has: 404)')
  t.match((await call(lane.url + '/health/ready')).body, { status: 'ready', warming: false })
})
