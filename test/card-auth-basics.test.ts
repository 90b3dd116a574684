// Card authorization through the gateway against real processes and PostgreSQL:
// approvals place holds, declines say why, replays never hold twice.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call } from './helpers/http.ts'

const db = await testDatabase(t)
await db.query(`insert into card_auth.card_accounts (token, currency, available, status) values
  ('tok_test_rich', 'EUR', 100000, 'active'), ('tok_test_poor', 'EUR', 100, 'active'), ('tok_test_frozen', 'EUR', 100000, 'inactive')`)
const fleet = await startFleet(t, db, { lanes: ['card-auth'] })
const auth = (card: string, value: number, currency = 'EUR', key?: string) => fleet.post('/v1/authorizations', { merchantId: 'm_1', cardToken: card, amount: { value, currency } }, key)

t.test('an approval places a hold atomically', async t => {
  const r = await auth('tok_test_rich', 2500)
  t.equal(r.status, 201)
  t.equal(r.body.status, 'approved')
  t.same(r.body.amount, { value: 2500, currency: 'EUR' })
  const [acct] = await db.query('select available, held from card_auth.card_accounts where token = $1', ['tok_test_rich'])
  t.same(acct, { available: '97500', held: '2500' })
  const holds = await db.query('select amount from card_auth.holds where authorization_id = $1', [r.body.id])
  t.equal(holds.length, 1)
  const g = await fleet.get(`/v1/authorizations/${r.body.id}`)
  t.equal(g.status, 200)
  t.same(g.body, r.body)
})

t.test('every decline reason', async t => {
  t.equal((await auth('tok_test_poor', 101)).body.declineReason, 'insufficient_funds')
  t.equal((await auth('tok_test_none', 1)).body.declineReason, 'unknown_card')
  t.equal((await auth('tok_test_frozen', 1)).body.declineReason, 'card_inactive')
  t.equal((await auth('tok_test_rich', 1, 'USD')).body.declineReason, 'currency_mismatch')
  const [n] = await db.query<{ n: string }>("select count(*) as n from card_auth.holds h join card_auth.authorizations a on a.id = h.authorization_id where a.status = 'declined'")
  t.equal(n!.n, '0', 'no hold for a decline')
})

t.test('a replay returns the first response and never a second hold; a changed body is refused', async t => {
  const first = await auth('tok_test_rich', 700, 'EUR', 'replay-key-1')
  const again = await auth('tok_test_rich', 700, 'EUR', 'replay-key-1')
  t.equal(again.status, 201)
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.same(again.body, first.body)
  const changed = await auth('tok_test_rich', 701, 'EUR', 'replay-key-1')
  t.equal(changed.status, 422)
  t.equal(changed.body.code, 'ERR_IDEMPOTENCY_KEY_REUSED')
  const holds = await db.query("select h.id from card_auth.holds h join card_auth.authorizations a on a.id = h.authorization_id where a.idempotency_key = 'replay-key-1'")
  t.equal(holds.length, 1)
})

t.test('concurrent duplicates of one key place exactly one hold', async t => {
  // Straight to the lane: through the gateway the retry-storm guard would stop all but 4.
  const lane = fleet.lanes['card-auth']!.url
  const rs = await Promise.all(Array.from({ length: 20 }, () => call(lane + '/v1/authorizations', {
    json: { merchantId: 'm_1', cardToken: 'tok_test_rich', amount: { value: 100, currency: 'EUR' } },
    headers: { 'x-client-id': 'test-client', 'idempotency-key': 'dup-key' },
  })))
  // A duplicate that arrives while the first is still running is told so (409, retry later);
  // one that arrives after it replays it.
  const ok = rs.filter(r => r.status === 201)
  t.ok(rs.every(r => r.status === 201 || (r.status === 409 && r.body.code === 'ERR_IDEMPOTENCY_IN_PROGRESS')), rs.map(r => r.status).join(','))
  t.equal(new Set(ok.map(r => r.body.id)).size, 1, 'one authorization id for all that got one')
  t.equal(ok.filter(r => r.headers['idempotent-replayed'] !== 'true').length, 1, 'one original, the rest replays')
  const holds = await db.query("select h.id from card_auth.holds h join card_auth.authorizations a on a.id = h.authorization_id where a.idempotency_key = 'dup-key'")
  t.equal(holds.length, 1)
})
