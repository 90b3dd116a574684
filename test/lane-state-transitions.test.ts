// NORMAL -> SATURATED -> RECOVERING -> NORMAL on a real tax lane process, with
// the recovery window shortened to 1 s through config.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually } from './helpers/http.ts'

const env = { TAX_PERMITS: '3', TAX_STATE_RECOVER_WINDOW_MS: '1000' }
const db = await testDatabase(t, env)
const fleet = await startFleet(t, db, { lanes: ['tax'], env })
const taxUrl = fleet.lanes.tax!.url
const state = async () => (await call(taxUrl + '/status')).body.state as string
const stateMetric = async () => {
  const text = (await call(taxUrl + '/metrics')).body as string
  return Object.fromEntries([...text.matchAll(/^bulkhead_state\{lane="tax",state="(\w+)"[^}]*\} (\d)/gm)].map(m => [m[1], Number(m[2])]))
}

t.test('the lane walks through its states and reports them in /status, /health/ready and metrics', async t => {
  t.equal(await state(), 'NORMAL')
  await fleet.setFaults({ latencyMs: 1500 })
  const inflight = Array.from({ length: 3 }, () => fleet.post('/v1/tax/quotes', { jurisdiction: 'FR', amount: { value: 1000, currency: 'EUR' } }))
  t.ok(await eventually(async () => (await state()) === 'SATURATED', 1_000, 20), 'SATURATED when all 3 permits are busy (queue 0)')
  t.same(await stateMetric(), { NORMAL: 0, SATURATED: 1, RECOVERING: 0 }, 'one-hot state gauge')
  const ready = await call(taxUrl + '/health/ready')
  t.equal(ready.status, 200, 'saturation is reported, not failed, by readiness')
  t.equal(ready.body.state, 'SATURATED')
  // US-NV has no compensation rate: a shed request is refused, not compensated.
  const shed = await fleet.post('/v1/tax/quotes', { jurisdiction: 'US-NV', amount: { value: 1000, currency: 'EUR' } })
  t.equal(shed.body.code, 'ERR_TAX_BULKHEAD_SATURATED')
  await Promise.all(inflight)
  t.ok(await eventually(async () => (await state()) === 'RECOVERING', 1_000, 20), 'RECOVERING once the permits come back')
  const t0 = Date.now()
  t.ok(await eventually(async () => (await state()) === 'NORMAL', 5_000, 50), 'NORMAL after the recovery window')
  t.ok(Date.now() - t0 >= 500, 'not before (most of) the 1 s window had passed')
  await fleet.setFaults({ mode: 'normal' })
})
