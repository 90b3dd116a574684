// A lane replica's pool follows the replicas that really run
// (shared/lane-kit/replica-share.ts): alone it uses its role's whole budget; a
// second replica takes its fair share as the first gives it up; one that stops
// hands its share back at once, one that is killed after its heartbeat's TTL.
// At no moment do the replicas hold more than the role's CONNECTION LIMIT
// (sampled from pg_stat_activity all along). Real card-auth processes on a
// real PostgreSQL, with a short heartbeat.
import pg from 'pg'
import t from 'tap'
import { laneLimits } from '../shared/lanes.ts'
import { testDatabase } from './helpers/db.ts'
import { call, eventually, sleep } from './helpers/http.ts'
import { laneEnv, startProcess, type Proc } from './helpers/procs.ts'

const env = { CARD_AUTH_REPLICA_HEARTBEAT_MS: '200', CARD_AUTH_REPLICA_TTL_MS: '1500' }
const db = await testDatabase(t, env)
const limits = laneLimits('card-auth', { ...db.env, ...env })
const role = limits.db.role
const limit = limits.db.roleConnectionLimit
const start = (name: string): Promise<Proc> => startProcess(t, name, 'services/card-auth/main.ts', laneEnv('card-auth', { ...db.env, ...env }, db.roleUrl(role)))
const status = async (p: Proc): Promise<{ pool: { max: number, total: number }, db: { replicas: number, share: number } }> => (await call(p.url + '/status')).body

// Every 25 ms, how many connections the role has: the most ever seen is the test's verdict.
const sampler = new pg.Client({ connectionString: db.superUrl })
await sampler.connect()
let most = 0
let sampling = true
const sampled = (async () => {
  while (sampling) {
    const { rows } = await sampler.query<{ n: number }>('select count(*)::int as n from pg_stat_activity where usename = $1', [role])
    most = Math.max(most, rows[0]!.n)
    await sleep(25)
  }
})()
t.teardown(async () => { sampling = false; await sampled; await sampler.end() })

const until = (p: Proc, want: { max: number, replicas: number }): Promise<boolean> =>
  eventually(async () => {
    const s = await status(p)
    return s.pool.max === want.max && s.db.replicas === want.replicas
  }, 20_000, 100)

t.test('alone, two, one stopped, one killed: each pool its share, the role never over its limit', async t => {
  const whole = limits.db.replicaBudget - 2 // less its writer's connection and the one kept for a reset
  const half = Math.floor(limits.db.replicaBudget / 2) - 2
  const a = await start('card-auth-a')
  t.ok(await until(a, { max: whole, replicas: 1 }), `alone: the whole budget (pool max ${whole})`)
  t.ok(await eventually(async () => (await status(a)).pool.total === whole, 20_000, 100), 'and its warm-up opened it')

  const b = await start('card-auth-b')
  t.ok(await until(a, { max: half, replicas: 2 }), `a second replica: the first shrinks to half (${half})`)
  t.ok(await until(b, { max: half, replicas: 2 }), 'and the second grows to it')
  t.ok(await eventually(async () => (await status(b)).pool.total === half, 20_000, 100), 'the second opened its share')
  t.ok((await status(a)).pool.total <= half, 'the first closed what it gave up')
  // The pool is open before the hot path has run and the line is written: wait for the line.
  const warm = await eventually(async () => b.log.map(l => { try { return JSON.parse(l) as { msg?: string, warmed?: number } } catch { return {} } }).find(o => o.msg === 'warm: ready'), 20_000, 50)
  t.equal(warm?.warmed, half, 'the second warmed its whole share before it reported ready')

  await b.kill('SIGTERM')
  t.ok(await until(a, { max: whole, replicas: 1 }), 'the second stopped: the first takes the whole budget back')
  t.ok(await eventually(async () => (await status(a)).pool.total === whole, 20_000, 100), 'and opens it')

  const c = await start('card-auth-c')
  t.ok(await until(a, { max: half, replicas: 2 }), 'a third joins: halves again')
  t.ok(await until(c, { max: half, replicas: 2 }))
  await c.kill('SIGKILL')
  t.ok(await until(a, { max: whole, replicas: 1 }), 'killed without a goodbye: its share comes back after its heartbeat\'s TTL')

  await a.kill('SIGTERM')
  // Two started at the same moment (as Compose starts a scaled service): each
  // heartbeat decides under the lane's lock, so neither takes a share the
  // other has already claimed.
  const [d, e] = await Promise.all([start('card-auth-d'), start('card-auth-e')])
  t.ok(await until(d, { max: half, replicas: 2 }), 'two started together: each gets half')
  t.ok(await until(e, { max: half, replicas: 2 }))
  t.ok(await eventually(async () => (await status(d)).pool.total === half && (await status(e)).pool.total === half, 20_000, 100), 'and both open it')
  const auth = await call(d.url + '/v1/authorizations/00000000-0000-7000-8000-000000000001', { headers: { 'x-client-id': 'c1' } })
  t.equal(auth.status, 404, 'and serve (no connection refused by the role)')

  t.ok(most <= limit, `at most ${most} of the role's ${limit} connections at any sample`)
  t.ok(most > half, `the sampler saw the pools open (${most})`)
})
