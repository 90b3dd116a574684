// DEC-BH-01: a pool client checked out for longer than 2,000 ms is reported
// once, with the stack of the code that took it, and counted in
// db_pool_connection_leaks_total, on every pool of the fleet. In process, on a
// role pool (the worker's and the deck's kind); and in a real card-auth lane,
// whose authorization waits 2.5 s on a row lock.
import pg from 'pg'
import t from 'tap'
import { createRolePool } from '../shared/db/pool.ts'
import { deckRoleName } from '../shared/lanes.ts'
import { testDatabase } from './helpers/db.ts'
import { call, eventually, sleep } from './helpers/http.ts'
import { laneEnv, startProcess } from './helpers/procs.ts'

const db = await testDatabase(t)

t.test('a role pool reports a client held past 2,000 ms, once, with where it was taken', async t => {
  const warnings: Array<{ obj: Record<string, unknown>, msg: string }> = []
  const pool = createRolePool(db.roleUrl(deckRoleName(db.env)), { max: 2, applicationName: 'watertight-leaktest' }, { error: () => {}, warn: (obj, msg) => warnings.push({ obj: obj as Record<string, unknown>, msg }) })
  t.teardown(() => pool.end())
  const leaks: unknown[] = []
  ;(pool as unknown as NodeJS.EventEmitter).on('leak', r => leaks.push(r))
  const brief = await pool.connect()
  await sleep(1_000)
  brief.release()
  const held = await pool.connect()
  t.ok(await eventually(async () => leaks.length === 1, 5_000, 50), 'the client held past the threshold is reported')
  await sleep(1_000)
  held.release()
  t.equal(leaks.length, 1, 'once, and the client held for 1 s not at all')
  t.match(warnings[0]?.msg, /connection leak: a leaktest pool client has been checked out for over 2000 ms \(DEC-BH-01\)/)
  t.match(warnings[0]?.obj, { pool: 'leaktest', thresholdMs: 2000, heldMs: Number })
  t.match(String(warnings[0]?.obj.stack), /leak-detection\.test\.ts/, 'with the stack of the code that took it')
})

t.test('a lane counts a connection its execution held 2.5 s in db_pool_connection_leaks_total', async t => {
  await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_leak', 'EUR', 10000)")
  const lane = await startProcess(t, 'card-auth', 'services/card-auth/main.ts', laneEnv('card-auth', db.env, db.laneUrl('card-auth')))
  // Its pool warms up after it listens, holding its connections until all are open: not leaks.
  t.ok(await eventually(async () => (await call(lane.url + '/status')).body.pool.idle === (await call(lane.url + '/status')).body.pool.max, 20_000, 100), 'the pool is warm')
  const leaks = async () => Number(/^db_pool_connection_leaks_total\{pool="card-auth",process="card-auth"\} (\d+)/m.exec((await call(lane.url + '/metrics')).body)?.[1] ?? 0)
  t.equal(await leaks(), 0, 'none before')
  const locker = new pg.Client({ connectionString: db.superUrl })
  await locker.connect()
  t.teardown(() => locker.end())
  await locker.query('begin')
  await locker.query("select * from card_auth.card_accounts where token = 'tok_leak' for update")
  const authorize = call(lane.url + '/v1/authorizations', { json: { merchantId: 'm', cardToken: 'tok_leak', amount: { value: 1, currency: 'EUR' } }, headers: { 'x-client-id': 'leak-client', 'idempotency-key': 'leak-1' } })
  t.ok(await eventually(async () => (await leaks()) === 1, 8_000, 100), 'counted once the execution has held its connection past 2,000 ms')
  await locker.query('rollback')
  t.equal((await authorize).status, 201, 'the authorization itself completes')
  // The lane runs bundled: its stack names functions (and dist/ files), the
  // authorization's write inside the lane kit's execution.
  t.ok(await eventually(async () => lane.log.some(l => l.includes('connection leak') && /\bauthorizeOne\b/.test(l) && /\bexecute\b/.test(l)), 10_000, 50), 'and the report says where the connection was taken')
})
