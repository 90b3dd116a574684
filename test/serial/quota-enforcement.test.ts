// Quota enforcement (test_bulkhead_quota_enforcement): under synthetic overload
// no lane runs more than its permits, queues more than its queue, opens more
// than its pool, and no role has more connections than its CONNECTION LIMIT.
// Overload is made real: the card accounts are row-locked from outside, so card
// authorizations block in PostgreSQL; the tax provider answers after 600 ms.
import t from 'tap'
import pg from 'pg'
import { testDatabase } from '../helpers/db.ts'
import { startFleet } from '../helpers/fleet.ts'
import { call, sleep } from '../helpers/http.ts'

const limitsEnv = {
  CARD_AUTH_PERMITS: '6',
  CARD_AUTH_QUEUE: '3',
  CARD_AUTH_QUEUE_WAIT_MS: '2000',
  CARD_AUTH_POOL_MAX: '4',
  TAX_PERMITS: '4',
  TAX_POOL_MAX: '2',
  FRAUD_PERMITS: '3',
  FRAUD_QUEUE: '2',
  FRAUD_POOL_MAX: '2',
}
const db = await testDatabase(t, limitsEnv)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_quota_1', 'EUR', 1000000000)")
const fleet = await startFleet(t, db, { env: limitsEnv })

t.test('no lane exceeds its permits, queue or pool; no role exceeds its limit', async t => {
  await fleet.setFaults({ latencyMs: 600 })
  const locker = new pg.Client({ connectionString: db.superUrl })
  await locker.connect()
  t.teardown(() => locker.end())
  await locker.query('begin')
  await locker.query("select * from card_auth.card_accounts where token = 'tok_quota_1' for update")

  type Peak = { active: number, queue: number, pool: number }
  const none = (): Peak => ({ active: 0, queue: 0, pool: 0 })
  const max = { card: none(), tax: none(), roles: {} as Record<string, number> }
  const peak = (m: Peak, s: { active: number, queue: { depth: number }, pool: { total: number } }): Peak => ({
    active: Math.max(m.active, s.active), queue: Math.max(m.queue, s.queue.depth), pool: Math.max(m.pool, s.pool.total),
  })
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      const [c, x, roles] = await Promise.all([fleet.status('card-auth'), fleet.status('tax'), db.connectionsByRole()])
      max.card = peak(max.card, c)
      max.tax = peak(max.tax, x)
      for (const [r, n] of Object.entries(roles)) max.roles[r] = Math.max(max.roles[r] ?? 0, n)
      await sleep(20)
    }
  })()
  const cards = Array.from({ length: 40 }, () => fleet.post('/v1/authorizations', { merchantId: 'm_q', cardToken: 'tok_quota_1', amount: { value: 1, currency: 'EUR' } }))
  const taxes = Array.from({ length: 40 }, () => fleet.post('/v1/tax/quotes', { jurisdiction: 'US-NV', amount: { value: 1000, currency: 'USD' } }))
  await sleep(800)
  // The queued card requests are waiting; release the lock so everything finishes.
  await locker.query('rollback')
  const [cr, tr] = await Promise.all([Promise.all(cards), Promise.all(taxes)])
  sampling = false
  await sampler

  t.comment(`observed maxima: ${JSON.stringify(max)}`)
  t.ok(max.card.active <= 6, `card-auth active <= 6 permits (max ${max.card.active})`)
  t.equal(max.card.active, 6, 'the overload really filled the card-auth permits')
  t.ok(max.card.queue <= 3, `card-auth queue <= 3 (max ${max.card.queue})`)
  t.ok(max.card.pool <= 4, `card-auth pool <= 4 (max ${max.card.pool})`)
  t.ok(max.tax.active <= 4, `tax active <= 4 (max ${max.tax.active})`)
  t.equal(max.tax.queue, 0, 'tax never queues')
  t.ok(max.tax.pool <= 2, `tax pool <= 2 (max ${max.tax.pool})`)
  t.ok((max.roles.card_auth_ds ?? 0) <= 4 && (max.roles.tax_ds ?? 0) <= 2 && (max.roles.fraud_ds ?? 0) <= 2, `role connections within limits ${JSON.stringify(max.roles)}`)

  const ok = cr.filter(r => r.status === 201).length
  const saturated = cr.filter(r => r.status === 429 && r.body.code === 'ERR_CARD_AUTH_SATURATED')
  const dist = (rs: typeof cr) => JSON.stringify(rs.reduce<Record<string, number>>((m, r) => { const k = `${r.status} ${r.body?.code ?? ''}`; m[k] = (m[k] ?? 0) + 1; return m }, {}))
  t.equal(ok + saturated.length, 40, `every card request was either authorized or told the lane is saturated: ${dist(cr)}`)
  t.ok(saturated.length >= 40 - 9, `at most permits + queue were admitted (${ok} ok, ${saturated.length} saturated)`)
  t.ok(saturated.every(r => r.headers['retry-after'] && r.headers.ratelimit && r.headers['ratelimit-policy']), '429s carry Retry-After and RateLimit headers')
  t.ok(saturated.every(r => r.headers['content-type']?.startsWith('application/problem+json')), '429s are problem+json')
  const [{ n }] = await db.query<{ n: string }>('select count(*) as n from card_auth.authorizations') as [{ n: string }]
  t.equal(Number(n), ok, 'one authorization row per 201, none for a rejection')
  const taxOk = tr.filter(r => r.status === 200).length
  t.equal(taxOk + tr.filter(r => r.body.code === 'ERR_TAX_BULKHEAD_SATURATED').length, 40, `every tax request quoted or shed: ${dist(tr)}`)
  t.ok(taxOk <= 8, `tax admitted no more than its permits over the window (${taxOk})`)
  const status = await call(fleet.lanes['card-auth']!.url + '/status')
  t.equal(status.body.active, 0, 'every card-auth permit came back')
  t.ok(status.body.rejections.queue_full > 0, 'rejections are counted by reason')
  await fleet.setFaults({ mode: 'normal' })
})
