// The gateway is ready only once warm (gateway/warm-up.ts): it sends its own
// listener card authorizations through the whole data-plane path, card-auth's
// writer rehearses them in a transaction it rolls back, and none of it counts
// as traffic. A client cannot make a request a rehearsal. Without a ready
// card-auth the gateway waits, unready, then turns ready cold.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually } from './helpers/http.ts'
import { startProcess } from './helpers/procs.ts'

const db = await testDatabase(t)
const parsed = (log: string[]): Array<{ msg?: string, [k: string]: unknown }> =>
  log.map(l => { try { return JSON.parse(l) } catch { return {} } })
/** Observations of a route in a process's request histogram. */
const observed = async (url: string, route: string): Promise<number> => {
  const text = (await call(`${url}/metrics`)).body as string
  return [...text.matchAll(/^http_request_duration_seconds_count\{([^}]*)\} (\d+)$/gm)].filter(m => m[1]!.includes(`route="${route}"`)).reduce((n, m) => n + Number(m[2]), 0)
}

// The lane's own shedding off: on a starved host its first event-loop sample can
// shed what it is sent, rehearsals as any; what is tested here is the gateway.
const LANE_UNPRESSED = { CARD_AUTH_PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0', CARD_AUTH_PRESSURE_MAX_EVENT_LOOP_UTILIZATION: '0' }

t.test('warm: authorizations through its own listener, rehearsed, none written, none counted', async t => {
  const fleet = await startFleet(t, db, { lanes: ['card-auth'], env: { ...LANE_UNPRESSED, GATEWAY_WARM_UP_REQUESTS: '60' } })
  const gw = fleet.gateway.url
  t.ok(await eventually(async () => (await call(`${gw}/health/ready`)).status === 200 || undefined, 60_000, 100), 'ready')
  // Its log line is written before it turns ready; its pipe may bring it a moment later.
  const warm = await eventually(async () => parsed(fleet.gateway.log).find(o => o.msg === 'warm: ready'), 10_000, 50)
  t.match(warm, { requests: 60, statuses: { 201: 60 } }, 'after 60 authorizations, each answered 201 by card-auth')
  const [rows] = await db.query<{ n: number }>('select count(*)::int as n from card_auth.authorizations')
  t.equal(rows!.n, 0, 'none of them written: the lane\'s writer rolled each batch back')
  t.equal(await observed(gw, '/v1/authorizations'), 0, 'none in the gateway\'s request metrics')
  t.equal(await observed(fleet.lanes['card-auth']!.url, '/v1/authorizations'), 0, 'none in the lane\'s')

  // A client's header of the warm-up's name is passed on to no lane: its authorization is written.
  const r = await call(`${gw}/v1/authorizations`, {
    json: { merchantId: 'm_warm_test', cardToken: 'tok_warm_probe', amount: { value: 100, currency: 'EUR' } },
    headers: { authorization: `Bearer ${fleet.apiKey}`, 'idempotency-key': `probe-${process.pid}`, 'x-watertight-warm-up': '1' },
  })
  t.equal(r.status, 201, 'a client\'s authorization that carries the header')
  const [written] = await db.query<{ n: number }>('select count(*)::int as n from card_auth.authorizations where id = $1', [r.body.id])
  t.equal(written!.n, 1, 'is written all the same')
  t.equal(await observed(gw, '/v1/authorizations'), 1, 'and counted')
  const forged = await call(`${gw}/v1/authorizations`, {
    json: { merchantId: 'm_warm_test', cardToken: 'tok_warm_probe', amount: { value: 100, currency: 'EUR' } },
    headers: { authorization: 'Bearer not-a-key-of-anyone-0000000000', 'idempotency-key': `forged-${process.pid}` },
  })
  t.equal(forged.status, 401, 'once warm, no key but a client\'s authenticates')

  // A gateway under pressure (a heap limit of 1 byte: always, once it has
  // sampled) sheds clients, but not its own warm-up, which no client waits on.
  // card-auth is held (SIGSTOP) so the warm-up waits until the gateway sheds.
  const lane = fleet.lanes['card-auth']!
  lane.proc.kill('SIGSTOP')
  t.teardown(() => { lane.proc.kill('SIGCONT') })
  const pressed = await startProcess(t, 'gateway', 'gateway/main.ts', {
    GATEWAY_PORT: '0',
    GATEWAY_HOST: '127.0.0.1',
    API_KEYS_FILE: fleet.keysFile,
    GATEWAY_PRESSURE_MAX_HEAP_BYTES: '1',
    GATEWAY_WARM_UP_REQUESTS: '60',
    CARD_AUTH_URL: lane.url,
    FRAUD_URL: 'http://127.0.0.1:9',
    TAX_URL: 'http://127.0.0.1:9',
  })
  const shed = await eventually(async () => {
    const r = await call(`${pressed.url}/v1/authorizations`, {
      json: { merchantId: 'm_warm_test', cardToken: 'tok_warm_probe', amount: { value: 100, currency: 'EUR' } },
      headers: { authorization: `Bearer ${fleet.apiKey}`, 'idempotency-key': `pressed-${process.pid}` },
    })
    return r.body?.code === 'ERR_GATEWAY_OVERLOADED' ? r : undefined
  }, 10_000, 100)
  lane.proc.kill('SIGCONT')
  const pressedWarm = await eventually(async () => parsed(pressed.log).find(o => o.msg === 'warm: ready'), 60_000, 50)
  t.match(pressedWarm, { requests: 60, statuses: { 201: 60 } }, 'under pressure, its warm-up is not shed')
  t.equal(shed?.status, 503, 'while a client\'s authorization is: 503 ERR_GATEWAY_OVERLOADED')
})

t.test('no card-auth ready: unready while it waits, then ready cold', async t => {
  const fleet = await startFleet(t, db, { lanes: ['fraud'], env: { GATEWAY_WARM_UP_REQUESTS: '60', GATEWAY_WARM_UP_WAIT_MS: '5000' } })
  const gw = fleet.gateway.url
  const first = await call(`${gw}/health/ready`)
  t.equal(first.status, 503, 'not ready while the warm-up waits for card-auth')
  t.match(first.body, { status: 'unready', reason: 'warming up' })
  t.ok(await eventually(async () => (await call(`${gw}/health/ready`)).status === 200 || undefined, 60_000, 100), 'ready once the wait is over')
  t.ok(await eventually(async () => parsed(fleet.gateway.log).some(o => o.msg === 'warm-up skipped: no card-auth replica ready; ready cold') || undefined, 10_000, 50), 'and says it is cold')
  t.equal((await call(`${gw}/v1/fraud/screenings/00000000-0000-7000-8000-000000000000`, { headers: { authorization: `Bearer ${fleet.apiKey}` } })).status, 404, 'serving the lanes that run')
})
