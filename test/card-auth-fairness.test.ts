// A merchant's flash sale costs that merchant its excess, and nobody else
// anything: a real card-auth lane process whose one hot merchant holds every
// permit (its card account's row is locked by the test, so each of its
// authorizations waits with its permit) and fills the queue, while three quiet
// merchants each send one. With fair admission the quiet ones take the hot
// merchant's queue places and the next permits; with FIFO (CARD_AUTH_FAIR_BY=off,
// the same lane as before) they are refused. Small limits (6 permits, 4 places)
// keep the counts exact; the queue budget is long so no waiter times out while
// the row is held.
import type { Test } from 'tap'
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { call, eventually, type Res } from './helpers/http.ts'
import { laneEnv, startProcess } from './helpers/procs.ts'

const LIMITS = { CARD_AUTH_PERMITS: '6', CARD_AUTH_QUEUE: '4', CARD_AUTH_QUEUE_WAIT_MS: '20000' }
const db = await testDatabase(t, LIMITS)
await db.query(`insert into card_auth.card_accounts (token, currency, available, status) values
  ('tok_fair_hot', 'EUR', 100000000, 'active'), ('tok_fair_q1', 'EUR', 100000, 'active'), ('tok_fair_q2', 'EUR', 100000, 'active'), ('tok_fair_q3', 'EUR', 100000, 'active')`)

let n = 0
/**
 * A card-auth lane with `extra` env, ready; its /status, an authorization of a
 * merchant on a card, and a hold on card rows until `free()`.
 */
async function startLane (t: Test, name: string, extra: Record<string, string>) {
  const env = { ...LIMITS, ...extra }
  const lane = await startProcess(t, name, 'services/card-auth/main.ts', laneEnv('card-auth', { ...db.env, ...env }, db.laneUrl('card-auth', env)))
  await eventually(async () => (await call(lane.url + '/health/ready')).status === 200, 30_000)
  const holder = await db.pool.connect()
  let held = false
  t.teardown(async () => { if (held) await holder.query('rollback'); holder.release() })
  return {
    lane,
    status: async () => (await call(lane.url + '/status')).body,
    auth: (merchantId: string, card: string): Promise<Res> => call(lane.url + '/v1/authorizations', {
      json: { merchantId, cardToken: card, amount: { value: 1, currency: 'EUR' } },
      headers: { 'x-client-id': 'fair-client', 'idempotency-key': `fair-${name}-${++n}` },
    }),
    hold: async (cards: string[]) => { await holder.query('begin'); await holder.query('select 1 from card_auth.card_accounts where token = any($1) for update', [cards]); held = true },
    free: async () => { await holder.query('commit'); held = false },
  }
}

async function scenario (t: Test, fairBy: 'merchant' | 'off') {
  const { lane, status, auth, hold, free } = await startLane(t, `card-auth-${fairBy}`, { CARD_AUTH_FAIR_BY: fairBy })
  await hold(['tok_fair_hot'])

  const hot: Array<Promise<Res>> = []
  for (let i = 0; i < 6; i++) hot.push(auth('m_flash', 'tok_fair_hot'))
  t.ok(await eventually(async () => (await status()).active === 6, 10_000, 20), 'the hot merchant holds every permit, each waiting on its card account')
  for (let i = 0; i < 4; i++) hot.push(auth('m_flash', 'tok_fair_hot'))
  t.ok(await eventually(async () => (await status()).queue.depth === 4, 10_000, 20), 'and every queue place')
  const over = await Promise.all([auth('m_flash', 'tok_fair_hot'), auth('m_flash', 'tok_fair_hot')])
  t.same(over.map(r => [r.status, r.body.code, r.body.fairShare]), [[429, 'ERR_CARD_AUTH_SATURATED', undefined], [429, 'ERR_CARD_AUTH_SATURATED', undefined]],
    'alone, the hot merchant\'s excess is refused as by the plain bulkhead')

  const quiet = ['1', '2', '3'].map(i => auth(`m_quiet_${i}`, `tok_fair_q${i}`))
  // Decided at once either way: a place taken (the request waits) or a 429.
  await eventually(async () => {
    const s = await status()
    return s.queue.depth === 4 && (s.rejections.queue_full ?? 0) >= 5
  }, 10_000, 20)
  const during = { ...await status(), metrics: (await call(lane.url + '/metrics')).body as string }
  await free()
  const [hotRes, quietRes] = await Promise.all([Promise.all(hot), Promise.all(quiet)])
  await lane.kill()
  return { hot: hotRes, quiet: quietRes, during }
}

t.test('fair: the quiet merchants take the hot one\'s places and the next permits', async t => {
  const { hot, quiet, during } = await scenario(t, 'merchant')
  t.same(quiet.map(r => r.status), [201, 201, 201], 'every quiet merchant\'s authorization is approved')
  const refused = hot.filter(r => r.status === 429)
  t.equal(refused.length, 3, 'three of the hot merchant\'s queued requests gave their places up')
  t.equal(hot.filter(r => r.status === 201).length, 7, 'its 6 running and its 1 waiter left are approved')
  for (const r of refused) {
    t.match(r.body, { code: 'ERR_CARD_AUTH_SATURATED', fairShare: { tenant: 'm_flash', held: 6, displaced: true } })
    t.match(r.body.detail, /merchant m_flash held 6 permits and \d queue places? when this request gave its queue place to one holding less; its fair share is [\d.]+ of the 6 permits while \d merchants are in flight/)
    t.ok(r.headers['retry-after'] && r.headers.ratelimit, 'Retry-After and RateLimit fields as any 429')
  }
  t.equal(during.fair.by, 'merchant')
  t.equal(during.fair.tenants, 4, 'four merchants in flight')
  t.equal(during.fair.displaced, 3)
  t.same(during.fair.top.map((x: { tenant: string, held: number, queued: number }) => [x.tenant, x.held, x.queued]).slice(0, 1), [['m_flash', 6, 1]], '/status names the merchant holding the most first')
  t.equal(during.fair.shed, 3, 'the displaced are counted as shed by fairness')
  t.match(during.metrics, /^bulkhead_tenants_in_flight\{lane="card-auth",process="card-auth"\} 4$/m)
  t.match(during.metrics, /^bulkhead_fair_shed_total\{lane="card-auth",process="card-auth"\} 3$/m)
  t.match(during.metrics, /^bulkhead_fair_displaced_total\{lane="card-auth",process="card-auth"\} 3$/m)
})

t.test('FIFO (CARD_AUTH_FAIR_BY=off): the quiet merchants are refused behind the hot one', async t => {
  const { hot, quiet, during } = await scenario(t, 'off')
  t.same(quiet.map(r => [r.status, r.body.fairShare]), [[429, undefined], [429, undefined], [429, undefined]], 'every quiet merchant is refused')
  t.equal(hot.filter(r => r.status === 201).length, 10, 'the hot merchant keeps every permit and place')
  t.equal(during.fair.tenants, 1, 'one tenant: everyone')
})

// The reserve: the hot merchant's own authorizations are slow (its card row
// held), a quiet one's too, and the last free permits are kept from the hot
// merchant, now at its share, so a third merchant is answered at once.
t.test('the reserve: the last permits go to a merchant under its share while the hot one waits', async t => {
  const { lane, status, auth, hold, free } = await startLane(t, 'card-auth-reserve', { CARD_AUTH_FAIR_RESERVE: '2' })
  await hold(['tok_fair_hot', 'tok_fair_q1'])
  const slow = [auth('m_quiet_1', 'tok_fair_q1')]
  t.ok(await eventually(async () => (await status()).active === 1, 10_000, 20), 'a quiet merchant in flight')
  for (let i = 0; i < 5; i++) slow.push(auth('m_flash', 'tok_fair_hot'))
  const hotAtShare = await eventually(async () => {
    const s = await status()
    return s.active === 4 && s.queue.depth === 2
  }, 10_000, 20)
  t.ok(hotAtShare, 'the hot merchant took 3 of 6 permits, its share between two; its next 2 wait beside the 2 kept free')
  const third = await auth('m_quiet_2', 'tok_fair_q2')
  t.equal(third.status, 201, 'a third merchant is answered at once from the reserve')
  t.equal((await status()).queue.depth, 2, 'while the hot merchant still waits')
  await free()
  const rest = await Promise.all(slow)
  t.same(rest.map(r => r.status), [201, 201, 201, 201, 201, 201], 'once the rows are free, everyone is served')
  await lane.kill()
})
