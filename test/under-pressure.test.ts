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
  const r = await eventually(async () => { const x = await fleet.post('/v1/fraud/screenings', { cardToken: 'tok_abcd', merchantId: 'm', amount: { value: 1, currency: 'EUR' } }); return x.status === 503 ? x : undefined }, 5_000, 100)
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
  t.equal((await db.query('select 1 from fraud.screenings')).length, 0, 'nothing written')
  await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_up_1', 'EUR', 1000)")
  const card = await fleet.post('/v1/authorizations', { merchantId: 'm', cardToken: 'tok_up_1', amount: { value: 1, currency: 'EUR' } })
  t.equal(card.status, 201, 'card-auth, another process, is not under pressure')
})
