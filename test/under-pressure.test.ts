// @fastify/under-pressure on a lane: past a pressure limit (here a heap limit
// of 1 byte, so the process is always "under pressure") data routes answer 503
// ERR_LANE_OVERLOADED with Retry-After and the RateLimit fields, readiness
// fails, liveness and metrics still answer, and the shed requests are counted.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually } from './helpers/http.ts'

const env = { FRAUD_PRESSURE_MAX_HEAP_BYTES: '1' }
const db = await testDatabase(t, env)
const fleet = await startFleet(t, db, { lanes: ['fraud', 'card-auth'], env })

t.test('a lane under pressure sheds with ERR_LANE_OVERLOADED; other lanes are unaffected', async t => {
  const lane = fleet.lanes.fraud!.url
  // Until the lane's second pressure sample, a screening may still be admitted
  // (and written): each is sent with its own key, and what was written is
  // checked against what was answered.
  const answered = new Map<string, number>()
  let n = 0
  const r = await eventually(async () => {
    const key = `up-${++n}`
    const x = await fleet.post('/v1/fraud/screenings', { cardToken: 'tok_abcd', merchantId: 'm', amount: { value: 1, currency: 'EUR' } }, key)
    answered.set(key, x.status)
    return x.status === 503 ? x : undefined
  }, 5_000, 100)
  t.ok(r, 'shed')
  t.equal(r!.body.code, 'ERR_LANE_OVERLOADED')
  t.equal(r!.headers['retry-after'], '5', 'Retry-After')
  t.match(r!.headers['content-type'], /problem\+json/)
  t.match(r!.body.type, /temporary-reduced-capacity$/)
  t.equal(r!.headers['ratelimit-policy'], '"fraud-pressure";q=0;w=5', 'RateLimit-Policy, through the gateway')
  t.equal(r!.headers.ratelimit, '"fraud-pressure";r=0;t=5', 'RateLimit')
  t.same(r!.body['violated-policies'], ['fraud-pressure'], 'violated-policies')
  t.equal((await call(lane + '/health/live')).status, 200, 'alive')
  const ready = await call(lane + '/health/ready')
  t.equal(ready.status, 503, 'not ready')
  t.equal(ready.body.underPressure, true)
  const metrics = (await call(lane + '/metrics')).body as string
  t.match(metrics, /bulkhead_rejection_total\{lane="fraud",reason="under_pressure"[^}]*\} [1-9]/)
  const written = new Set((await db.query<{ idempotency_key: string }>('select idempotency_key from fraud.screenings')).map(w => w.idempotency_key))
  const shed = [...answered].filter(([, status]) => status === 503).map(([k]) => k)
  t.ok(shed.length > 0 && shed.every(k => !written.has(k)), `no shed screening written (${shed.length} shed)`)
  t.same([...written].sort(), [...answered].filter(([, status]) => status === 200 || status === 202).map(([k]) => k).sort(), 'only the admitted ones were written')
  await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_up_1', 'EUR', 1000)")
  const card = await fleet.post('/v1/authorizations', { merchantId: 'm', cardToken: 'tok_up_1', amount: { value: 1, currency: 'EUR' } })
  t.equal(card.status, 201, 'card-auth, another process, is not under pressure')
})
