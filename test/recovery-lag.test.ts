// MC-RT-01's failure handling: "if recovery duration exceeds 10 s, trigger
// connection pool reset and emit P1 alert ALERT_BULKHEAD_RECOVERY_LAG". The tax
// provider hangs and every permit waits on it; meanwhile the lane's idle
// connections to PostgreSQL are black-holed (a TCP proxy freezes them, as a hung
// middlebox or a failover would). The provider heals, but the quotes admitted
// now take those connections for their first query and wait there until their
// deadline, so the permits stay taken. The lane notices that it lags its
// recovered provider, replaces its pool (new connections get through), raises
// and counts the alert, and serves again before the stuck quotes' deadline would
// have freed anything; then it is back to NORMAL.
// (Lag limit 1 s and deadline 6 s here instead of the default 10 s and 10 s,
// to keep the test short; the order of events is what is checked.)
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
const LAG_MS = 1_000
const env = { TAX_RECOVERY_LAG_MS: String(LAG_MS), TAX_DEADLINE_MS: '6000', TAX_QUOTE_DEADLINE_MS: '1000', TAX_STATE_RECOVER_WINDOW_MS: '1000', TAX_CERTIFICATE_FILE: certFile }
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

t.test('a recovery that lags its provider resets the pool, raises the alert, and the lane serves again at once', async t => {
  // Every connection the pool may open is open (and will be frozen): a pool short
  // of its max would open a fresh, unfrozen connection for a waiting quote, and
  // the lane would recover without any lag to notice.
  // Ready means warm: the warm-up holds its connections until all are open, and
  // quotes arriving before that would wait for them.
  t.ok(await eventually(async () => { const p = (await status()).pool; return p.total === p.max && p.max > 0 && (await call(tax.url + '/health/ready')).status === 200 }, 30_000, 50), 'the lane is warm: it holds every connection its pool may open')
  await faults({ mode: 'hang' })
  const answers: Array<{ at: number, status: number, source?: string }> = []
  const record = (p: Promise<{ status: number, body: any }>) => {
    void p.then(r => answers.push({ at: performance.now(), status: r.status, source: r.body?.source }))
  }
  // Every permit taken by a quote waiting on the hung provider (each has read
  // its idempotency record and given its connection back).
  for (let i = 0; i < 15; i++) record(quote())
  t.ok(await eventually(async () => { const s = await status(); return s.active === 15 && s.pool.idle === s.pool.total && s.pool.total === s.pool.max }, 10_000, 20), 'every permit waits on the provider, no connection is held, none was closed')
  // Each of them reached the hung provider (a request still on its way when the
  // provider heals would be answered, and the provider would never have failed).
  const hung = async () => Number(/^sandbox_quotes_total\{[^}]*mode="hang"[^}]*\} (\S+)$/m.exec((await call(sandbox.url + '/metrics')).body)?.[1] ?? 0)
  t.ok(await eventually(async () => await hung() >= 15, 10_000, 20), 'the provider holds all 15 calls')
  t.ok(proxy.freeze() > 0, 'the lane\'s connections to PostgreSQL are black-holed')
  // The provider heals; the quotes waiting on it miss their 1 s quote deadline and
  // go to write a compensated quote: on the frozen connections, until their 6 s deadline.
  await faults({ mode: 'normal' })
  let loading = true
  const load = (async () => { while (loading) { record(quote()); await sleep(50) } })()
  t.teardown(() => { loading = false })
  const lagged = await eventually(async () => (await status()).recovery.lags >= 1, 30_000, 50)
  t.ok(lagged, 'the lane noticed it lags its recovered provider')
  // The line comes through the child's stdout pipe, which the test may read after the status answer.
  t.ok(await eventually(async () => tax.log.some(l => l.includes('ALERT_BULKHEAD_RECOVERY_LAG')), 10_000, 50), 'and logged ALERT_BULKHEAD_RECOVERY_LAG')
  t.ok(await metric('bulkhead_pool_resets_total{lane="tax",process="tax"}') >= 1, 'bulkhead_pool_resets_total counts the reset')
  t.ok(await eventually(async () => answers.some(a => a.source === 'provider') && answers.some(a => a.status === 504), 20_000, 50), 'quotes are answered again, and the stuck ones were cut at their deadline')
  loading = false
  await load
  const served = answers.find(a => a.source === 'provider')!.at
  const firstCut = answers.find(a => a.status === 504)!.at
  t.ok(served < firstCut, 'the reset served quotes again before any stuck quote was cut at its deadline (which alone would have freed the frozen connections)')
  const normal = await eventually(async () => { const s = await status(); return s.state === 'NORMAL' && s.active < 5 ? s : undefined }, 20_000, 100)
  t.ok(normal, `the lane is back to NORMAL (${JSON.stringify(normal?.recovery)})`)
  t.equal(normal?.recovery.lagMs, 0, 'and no longer lags')
})
