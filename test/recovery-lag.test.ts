// MC-RT-01's failure handling: "if recovery duration exceeds 10 s, trigger
// connection pool reset and emit P1 alert ALERT_BULKHEAD_RECOVERY_LAG". The tax
// lane's connections to PostgreSQL are black-holed (a TCP proxy freezes them)
// while its provider hangs: the compensations written outside a permit take
// those connections and never give them back. The provider heals, but every
// admitted quote now waits for a connection that never comes, so the permits
// stay taken. The lane notices that it lags its recovered provider, replaces
// its pool (new connections get through), raises and counts the alert, and
// goes back to NORMAL. Without the reset the lane never recovers.
// (The lag limit is 2 s here instead of the default 10 s to keep the test short.)
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { certify } from '../services/tax/compensation/certify.ts'
import { DEFAULT_TABLE_FILE } from '../services/tax/compensation/table.ts'
import { testDatabase } from './helpers/db.ts'
import { freezeProxy } from './helpers/freeze-proxy.ts'
import { call, eventually, sleep } from './helpers/http.ts'
import { laneEnv, startProcess } from './helpers/procs.ts'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-lag-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const certFile = path.join(dir, 'certificate.json')
const LAG_MS = 2_000
const env = { TAX_RECOVERY_LAG_MS: String(LAG_MS), TAX_DEADLINE_MS: '4000', TAX_QUOTE_DEADLINE_MS: '3000', TAX_STATE_RECOVER_WINDOW_MS: '1000', TAX_CERTIFICATE_FILE: certFile }
const db = await testDatabase(t, env)
const pgUrl = new URL(db.laneUrl('tax', env))
const proxy = await freezeProxy(t, { host: pgUrl.hostname, port: Number(pgUrl.port) })
const viaProxy = new URL(pgUrl)
viaProxy.port = String(proxy.port)

const sandbox = await startProcess(t, 'tax-sandbox', 'services/tax-sandbox/main.ts', { TAX_SANDBOX_PORT: '0' })
fs.writeFileSync(certFile, JSON.stringify(await certify({ tableFile: DEFAULT_TABLE_FILE, providerUrl: sandbox.url })))
const tax = await startProcess(t, 'tax', 'services/tax/main.ts', laneEnv('tax', { ...db.env, ...env }, viaProxy.toString(), { TAX_PROVIDER_URL: sandbox.url }))
const status = async () => (await call(tax.url + '/status')).body
const faults = (f: Record<string, unknown>) => call(sandbox.url + '/faults', { method: 'PUT', json: f })
let n = 0
const quote = () => call(tax.url + '/v1/tax/quotes', { json: { jurisdiction: 'DE', amount: { value: 1_000, currency: 'EUR' } }, headers: { 'x-client-id': 'lag-client', 'idempotency-key': `lag-${++n}` } })
const metric = async (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec((await call(tax.url + '/metrics')).body)?.[1] ?? NaN)

t.test('a recovery that lags its provider resets the pool, raises the alert, and the lane recovers', async t => {
  t.ok(await eventually(async () => (await status()).pool.total > 0, 10_000, 50), 'the lane holds its warmed connections')
  await faults({ mode: 'hang' })
  // Every permit taken by a quote waiting on the hung provider (each has read
  // its idempotency record and given its connection back).
  const admitted = Array.from({ length: 15 }, quote)
  t.ok(await eventually(async () => { const s = await status(); return s.active === 15 && s.pool.idle === s.pool.total }, 10_000, 20), 'every permit waits on the provider, no connection is held')
  t.ok(proxy.freeze() > 0, 'the lane\'s connections to PostgreSQL are black-holed')
  // Quotes shed now are compensated outside any permit, on the frozen
  // connections: nothing cuts those, they never come back (nor do their answers).
  const stuck = Array.from({ length: 10 }, quote)
  t.ok(await eventually(async () => await metric('db_pool_connection_leaks_total{pool="tax",process="tax"}') >= 1, 10_000, 100), 'the connections stuck on the frozen server are reported as leaks (DEC-BH-01)')
  await Promise.all(admitted)

  await faults({ mode: 'normal' })
  // Steady load on the healed provider: admitted quotes wait for a connection that never comes.
  let loading = true
  const load = (async () => { while (loading) { void quote(); await sleep(50) } })()
  t.teardown(() => { loading = false })
  const lagged = await eventually(async () => (await status()).recovery.lags >= 1, 30_000, 100)
  t.ok(lagged, 'the lane noticed it lags its recovered provider')
  t.ok(tax.log.some(l => l.includes('ALERT_BULKHEAD_RECOVERY_LAG')), 'and logged ALERT_BULKHEAD_RECOVERY_LAG')
  t.ok(await metric('bulkhead_pool_resets_total{lane="tax",process="tax"}') >= 1, 'bulkhead_pool_resets_total counts the reset')
  const ok = await eventually(async () => (await quote()).body?.source === 'provider', 15_000, 100)
  t.ok(ok, 'quotes are answered by the provider again, on the new pool')
  loading = false
  await load
  const normal = await eventually(async () => { const s = await status(); return s.state === 'NORMAL' && s.active < 5 ? s : undefined }, 20_000, 100)
  t.ok(normal, `the lane is back to NORMAL (${JSON.stringify(normal?.recovery)})`)
  t.equal(normal?.recovery.lagMs, 0, 'and no longer lags')
  const late = await Promise.all(stuck)
  t.ok(late.every(r => r.status > 0), `the quotes stuck on the old connections were answered once the reset cut them (${[...new Set(late.map(r => r.status))].join(', ')})`)
})
