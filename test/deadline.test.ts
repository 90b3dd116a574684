// The hard execution deadline: a hung execution is cut, its permit comes back,
// and its database connection is handed back (destroyed, the server cancels the
// query), whether it hung on the provider (undici) or in PostgreSQL (pg).
import t from 'tap'
import pg from 'pg'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually } from './helpers/http.ts'

const DEFAULT_DEADLINE_MS = 10_000
const DEADLINE_MS = 500
const env = { TAX_DEADLINE_MS: String(DEADLINE_MS), TAX_QUOTE_DEADLINE_MS: '5000', CARD_AUTH_DEADLINE_MS: String(DEADLINE_MS) }
const db = await testDatabase(t, env)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_deadline', 'EUR', 10000)")
const fleet = await startFleet(t, db, { lanes: ['tax', 'card-auth'], env })

t.test('an execution hung on the provider is cut at the deadline and its permit returns', async t => {
  await fleet.setFaults({ mode: 'hang' })
  const rs = await Promise.all(Array.from({ length: 3 }, () => fleet.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 1000, currency: 'EUR' } })))
  for (const r of rs) {
    t.equal(r.status, 504)
    t.equal(r.body.code, 'ERR_DEADLINE_EXCEEDED')
    // The provider hangs forever and the lane's default hard cap is 10 s: an answer
    // after at least the configured 500 ms, and long before 10 s, is the 500 ms cut.
    t.ok(r.ms >= 0.9 * DEADLINE_MS && r.ms < DEFAULT_DEADLINE_MS / 2, `cut at the configured deadline (${r.ms.toFixed(0)} ms)`)
  }
  const s = (await call(fleet.lanes.tax!.url + '/status')).body
  t.equal(s.active, 0, 'permits back')
  t.equal(s.rejections.deadline, 3, 'counted as deadline')
  t.equal((await db.query('select 1 from tax.quotes')).length, 0, 'nothing half-written')
  await fleet.setFaults({ mode: 'normal' })
  const ok = await fleet.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 1000, currency: 'EUR' } })
  t.equal(ok.status, 200, 'the lane serves again')
})

t.test('an execution hung in PostgreSQL is cut, its connection is reclaimed and its transaction rolled back', async t => {
  const locker = new pg.Client({ connectionString: db.superUrl })
  await locker.connect()
  t.teardown(() => locker.end())
  await locker.query('begin')
  await locker.query("select * from card_auth.card_accounts where token = 'tok_deadline' for update")
  const r = await fleet.post('/v1/authorizations', { merchantId: 'm', cardToken: 'tok_deadline', amount: { value: 500, currency: 'EUR' } })
  t.equal(r.status, 504)
  t.equal(r.body.code, 'ERR_DEADLINE_EXCEEDED')
  const s = (await call(fleet.lanes['card-auth']!.url + '/status')).body
  t.equal(s.active, 0, 'permit back at once')
  const waiting = async () => (await db.query("select pid from pg_stat_activity where usename = $1 and wait_event_type = 'Lock'", [db.prefix + 'card_auth_ds'])).length
  t.ok(await eventually(async () => (await waiting()) === 0, 5_000, 100), 'the server gave up the blocked query (no card_auth_ds backend still waits on the lock)')
  await locker.query('rollback')
  t.equal((await db.query('select 1 from card_auth.authorizations')).length, 0, 'no authorization row')
  const [acct] = await db.query("select available, held from card_auth.card_accounts where token = 'tok_deadline'")
  t.same(acct, { available: '10000', held: '0' }, 'balance untouched')
  const ok = await fleet.post('/v1/authorizations', { merchantId: 'm', cardToken: 'tok_deadline', amount: { value: 500, currency: 'EUR' } })
  t.equal(ok.status, 201, 'the lane authorizes again with its reclaimed pool')
})
