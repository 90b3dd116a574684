// The gateway's capacity answers (DESIGN §2-3). A full in-flight cap on a lane
// that is up is saturation, answered as the lane would (card-auth: 429
// ERR_CARD_AUTH_SATURATED with Retry-After and RateLimit fields), counted as
// bulkhead_rejection_total{reason="gateway_cap"}; 503 ERR_LANE_UNAVAILABLE is
// only for a lane that is down or unreachable. The gateway's own shedding
// (ERR_GATEWAY_OVERLOADED) carries RateLimit fields too.
import t from 'tap'
import { laneLimits } from '../shared/lanes.ts'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { startLoneGateway } from './helpers/gateway.ts'
import { call, eventually, type Res } from './helpers/http.ts'

// One permit, no queue: the gateway's cap for card-auth is 2 x (1 + 0) + 150 = 152.
// The lane's event-loop limits off: the test pauses the lane (SIGSTOP) to hold
// the cap full, and on resuming the lane saw that pause as a 1.5 s event-loop
// stall and shed what was queued with its own 503 ERR_LANE_OVERLOADED (one CI
// run: all 152). That is the lane judging the test's pause, not the gateway's cap.
// The gateway as deployed: the lanes' internal timings stripped from its answers.
const env = { CARD_AUTH_PERMITS: '1', CARD_AUTH_QUEUE: '0', CARD_AUTH_PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0', CARD_AUTH_PRESSURE_MAX_EVENT_LOOP_UTILIZATION: '0', GATEWAY_SERVER_TIMING: 'off' }
const CAP = laneLimits('card-auth', env).gateway.inflightCap
const db = await testDatabase(t, env)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_cap_1', 'EUR', 1000000000)")
const fleet = await startFleet(t, db, { lanes: ['card-auth'], env })
const pressed = await startLoneGateway(t, { GATEWAY_PRESSURE_MAX_HEAP_BYTES: '1' }, { pressed: true })
const lane = fleet.lanes['card-auth']!
t.teardown(() => { lane.proc.kill('SIGCONT') })

const authorize = (key: string): Promise<Res> => fleet.post('/v1/authorizations', { merchantId: 'm_cap', cardToken: 'tok_cap_1', amount: { value: 1, currency: 'EUR' } }, key)
const dist = (rs: Res[]): Record<string, number> => rs.reduce<Record<string, number>>((m, r) => { const k = `${r.status} ${r.body?.code ?? ''}`; m[k] = (m[k] ?? 0) + 1; return m }, {})
const counter = async (name: string, labels: string): Promise<number> => {
  const text = (await call(fleet.gateway.url + '/metrics')).body as string
  return [...text.matchAll(new RegExp(`^${name}\\{${labels}[^}]*\\} (\\d+)`, 'gm'))].reduce((s, m) => s + Number(m[1]), 0)
}

t.test('400 authorizations at once with the card-auth cap full: 201 or 429 ERR_CARD_AUTH_SATURATED, never 503', async t => {
  t.equal((await authorize('cap-warm')).status, 201, 'the lane is up')
  // Pause the lane so the burst finds the gateway's cap full for certain: it is
  // up (its last answer came), just not answering for the moment.
  lane.proc.kill('SIGSTOP')
  let settled = 0
  const burst = Array.from({ length: 400 }, (_, i) => authorize(`cap-${i}`).finally(() => { settled++ }))
  const capped = await eventually(async () => settled >= 400 - CAP, 30_000)
  lane.proc.kill('SIGCONT')
  t.ok(capped, `all but the ${CAP} in flight were answered while the lane was paused (${settled})`)
  const rs = await Promise.all(burst)

  const d = dist(rs)
  t.same(Object.keys(d).sort(), ['201 ', '429 ERR_CARD_AUTH_SATURATED'].filter(k => d[k]), `every answer 201 or 429 ERR_CARD_AUTH_SATURATED: ${JSON.stringify(d)}`)
  t.notOk(rs.some(r => r.status === 503), 'none 503')
  const atGateway = rs.filter(r => r.status === 429 && r.body['violated-policies']?.[0] === 'gateway-card-auth')
  t.equal(atGateway.length, 400 - CAP, `the gateway answered the ${400 - CAP} over its cap itself`)
  const g = atGateway[0]!
  t.match(g.headers['content-type'], /^application\/problem\+json/)
  t.equal(g.body.type, 'https://watertight.dev/problems/quota-exceeded', 'problem type quota-exceeded')
  t.equal(g.headers['retry-after'], '1', 'Retry-After as the lane gives it')
  t.equal(g.headers['ratelimit-policy'], `"gateway-card-auth";q=${CAP};w=1`, 'RateLimit-Policy names the cap')
  t.equal(g.headers.ratelimit, '"gateway-card-auth";r=0;t=1', 'RateLimit: none left, room again in 1 s')
  t.equal(await counter('bulkhead_rejection_total', 'lane="card-auth",reason="gateway_cap"'), 400 - CAP, 'counted as bulkhead_rejection_total{reason="gateway_cap"}')
  t.equal(await counter('gateway_lane_unavailable_total', 'lane="card-auth"'), 0, 'and not as unavailability')
  const byLane = rs.filter(r => r.status === 429 && r.body['violated-policies']?.[0] !== 'gateway-card-auth')
  t.ok(byLane.length > 0 && rs.every(r => r.headers['server-timing'] === undefined), `no internal timings reach the client, the lane's own ${byLane.length} refusals included (GATEWAY_SERVER_TIMING off)`)
})

t.test('a lane that is down is still 503 ERR_LANE_UNAVAILABLE, also under a burst', async t => {
  const tax = await fleet.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 100, currency: 'EUR' } })
  t.equal(tax.status, 503, '503')
  t.equal(tax.body.code, 'ERR_LANE_UNAVAILABLE', 'tax, never started: unavailable')
  t.ok(tax.headers['retry-after'], 'with Retry-After')

  await lane.kill()
  t.equal((await authorize('cap-dead')).body.code, 'ERR_LANE_UNAVAILABLE', 'card-auth, stopped: unavailable')
  const rs = await Promise.all(Array.from({ length: 400 }, (_, i) => authorize(`cap-dead-${i}`)))
  t.same(dist(rs), { '503 ERR_LANE_UNAVAILABLE': 400 }, 'a burst at a lane that is down: every answer 503 ERR_LANE_UNAVAILABLE, none told it is saturated')
  t.ok(await counter('gateway_lane_unavailable_total', 'lane="card-auth"') >= 401, 'counted as unavailability')
})

t.test('the gateway under pressure: 503 ERR_GATEWAY_OVERLOADED with Retry-After and RateLimit fields', async t => {
  // A heap limit of 1 byte: the gateway is always under pressure once it has sampled.
  const r = await eventually(async () => {
    const x = await pressed.post('/v1/authorizations', { merchantId: 'm', cardToken: 'tok_x', amount: { value: 1, currency: 'EUR' } }, 'pressed-1')
    return x.body?.code === 'ERR_GATEWAY_OVERLOADED' ? x : undefined
  })
  t.ok(r, 'shed by the gateway itself')
  t.equal(r!.status, 503, '503')
  t.equal(r!.body.type, 'https://watertight.dev/problems/temporary-reduced-capacity', 'problem type temporary-reduced-capacity')
  t.equal(r!.headers['retry-after'], '1', 'Retry-After kept')
  t.match(r!.headers['ratelimit-policy'], /^"gateway";q=\d+;w=1$/, 'RateLimit-Policy')
  t.equal(r!.headers.ratelimit, '"gateway";r=0;t=1', 'RateLimit')
  t.same(r!.body['violated-policies'], ['gateway'], 'violated-policies')
})
