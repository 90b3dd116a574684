// Certified compensation (ADV-UC-01) on a real tax lane: when the provider fails,
// misses its deadline, or the lane is saturated, a certified table rate answers
// (never a default or zero rate) and each compensated quote is queued for
// reconciliation. Certification fails for a 1% edit, and the lane then refuses
// that jurisdiction; a stale certificate or a table whose checksum does not match
// is refused outright. The reconcile job records the true rate once the provider
// answers again.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { certify } from '../services/tax/compensation/certify.ts'
import { DEFAULT_TABLE_FILE, readTable, tableChecksum } from '../services/tax/compensation/table.ts'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { admitReason, call, eventually } from './helpers/http.ts'
import { ROOT, TS_LOADER } from './helpers/procs.ts'
import { startWorker } from './helpers/queue.ts'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-comp-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const tableFile = path.join(dir, 'table.json')
const certFile = path.join(dir, 'certificate.json')
const base = readTable(DEFAULT_TABLE_FILE)
// DE 0.26% above the provider: inside the ±0.5% tolerance, so reconciliation has a difference to record.
const writeTable = (rates: Record<string, number>, keepChecksum = false): void => {
  const body = { version: base.version, rates }
  const checksum = keepChecksum ? readTable(tableFile).checksum : tableChecksum(body)
  fs.writeFileSync(tableFile, JSON.stringify({ ...body, checksum }))
}
writeTable({ ...base.rates, DE: 0.1905 })

const env = { TAX_PERMITS: '1', TAX_QUOTE_DEADLINE_MS: '400', TAX_COMPENSATION_TABLE: tableFile, TAX_CERTIFICATE_FILE: certFile }
const db = await testDatabase(t, env)
const fleet = await startFleet(t, db, { lanes: ['tax'], env })
const taxUrl = fleet.lanes.tax!.url
fs.writeFileSync(certFile, JSON.stringify(await certify({ tableFile, providerUrl: fleet.sandbox.url })))
const certified = async (want: boolean) => eventually(async () => (await call(taxUrl + '/compensation')).body.certified === want, 6_000, 100)
// Wait until the lane has re-read exactly the files on disk (it polls them every 2 s).
const loaded = async () => {
  const table = JSON.parse(fs.readFileSync(tableFile, 'utf8')).checksum
  const cert = JSON.parse(fs.readFileSync(certFile, 'utf8'))
  return eventually(async () => { const s = (await call(taxUrl + '/compensation')).body; return s.tableChecksum === table && s.certifiedAt === cert.certifiedAt && s.certificateFor === cert.tableChecksum }, 8_000, 100)
}
const quote = (jurisdiction: string, value = 10_000) => fleet.post('/v1/tax/quotes', { jurisdiction, amount: { value, currency: 'EUR' } })

t.test('provider error, provider deadline and saturation are answered from the certified table', async t => {
  t.ok(await certified(true), 'the lane loaded the certificate')
  await fleet.setFaults({ errorRate: 1 })
  const e = await quote('DE')
  t.equal(e.status, 200)
  t.match(e.body, { source: 'compensation', tableVersion: base.version, rate: 0.1905, tax: { value: 1905 } })
  t.equal(e.headers['x-tax-compensation'], 'provider_error')

  // The provider would take 60 s; the 400 ms quote deadline cuts it.
  await fleet.setFaults({ latencyMs: 60_000 })
  const slow = quote('FR')
  await eventually(async () => (await call(taxUrl + '/status')).body.active === 1, 5_000, 10)
  const shed = await quote('IT')
  const d = await slow
  t.equal(d.body.source, 'compensation')
  t.equal(d.headers['x-tax-compensation'], 'provider_deadline', 'the 400 ms quote deadline cut the slow provider')
  t.equal(shed.headers['x-tax-compensation'], 'saturated', 'the second request found the one permit busy')
  t.equal(admitReason(shed), 'fail_fast', 'and was shed by the decision taken on arrival (tax has no queue)')

  const missing = await quote('US-NV')
  t.equal(missing.status, 503, 'a jurisdiction with no table rate is never given a made-up rate')
  t.equal(missing.body.code, 'ERR_TAX_PROVIDER_FAILED')
  t.equal(missing.headers['retry-after'], '5')
  const rows = await db.query<{ source: string, rate: string }>('select source, rate from tax.quotes')
  t.equal(rows.length, 3)
  t.ok(rows.every(r => r.source === 'compensation' && Number(r.rate) > 0), 'three compensated quotes, no zero rate')
  const jobs = await db.query("select 1 from jobs.jobs_hot where queue = 'tax-reconcile' and type = 'tax.reconcile'")
  t.equal(jobs.length, 3, 'each compensated quote is queued for reconciliation')
  await fleet.setFaults({ mode: 'normal' })
})

t.test('saturated with no certified rate: ERR_TAX_BULKHEAD_SATURATED with Retry-After: 5', async t => {
  await fleet.setFaults({ latencyMs: 1_000 })
  const slow = quote('FR')
  await new Promise(resolve => setTimeout(resolve, 50))
  const shed = await quote('US-NV')
  t.equal(shed.status, 503)
  t.equal(shed.body.code, 'ERR_TAX_BULKHEAD_SATURATED')
  t.equal(shed.headers['retry-after'], '5')
  await slow
  await fleet.setFaults({ mode: 'normal' })
})

t.test('reconciliation records the true rate once the provider answers, at its pace', async t => {
  await startWorker(t, db, ['tax-reconcile'], { TAX_DATABASE_URL: db.laneUrl('tax', env), TAX_PROVIDER_URL: fleet.sandbox.url, TAX_RECONCILE_PER_SECOND: '4', ...env })
  // A job records the rate on its quote, then leaves jobs_hot for the archive in a
  // second statement: wait for both, or the count below races the last archive.
  const done = await eventually(async () => (await db.query('select 1 from tax.quotes where reconciled_at is null')).length === 0 &&
    (await db.query("select 1 from jobs.jobs_hot where queue = 'tax-reconcile'")).length === 0, 15_000, 100)
  t.ok(done, 'every compensated quote reconciled, and its job finished')
  const [de] = await db.query<{ rate: string, tax: string, reconciled_rate: string, reconciled_tax: string }>("select rate, tax, reconciled_rate, reconciled_tax from tax.quotes where jurisdiction = 'DE'")
  t.same(de, { rate: '0.190500', tax: '1905', reconciled_rate: '0.190000', reconciled_tax: '1900' }, 'the provider rate and the 5-cent difference are on the quote')
  const [{ n, quotes }] = await db.query<{ n: number, quotes: number }>("select (select count(*)::int from jobs.jobs_archive where queue = 'tax-reconcile') as n, (select count(*)::int from tax.quotes where source = 'compensation') as quotes") as [{ n: number, quotes: number }]
  t.equal(n, quotes, 'one reconcile job per compensated quote')
  // The jobs were all waiting when the worker started; at 4 per second they start 250 ms apart, not at once.
  const at = (await db.query<{ ms: number }>("select extract(epoch from reconciled_at) * 1000 as ms from tax.quotes where source = 'compensation' order by reconciled_at")).map(r => Number(r.ms))
  const gaps = at.slice(1).map((x, i) => x - at[i]!)
  t.ok(gaps.length === quotes - 1 && gaps.length >= 2 && gaps.every(g => g >= 125), `reconciled one after another at the pace, not together (gaps ${gaps.map(g => Math.round(g)).join(', ')} ms)`)
})

t.test('a 1% error fails certification, and the lane refuses that jurisdiction', async t => {
  writeTable({ ...base.rates, DE: base.rates.DE! * 1.01 })
  const run = promisify(execFile)
  const cli = await run(process.execPath, [...TS_LOADER, 'services/tax/compensation/certify-cli.ts', '--table', tableFile, '--provider', fleet.sandbox.url, '--out', certFile], { cwd: ROOT }).catch(e => e as { code: number, stdout: string })
  t.equal((cli as { code?: number }).code, 1, 'tax:certify exits 1')
  t.match(cli.stdout, /FAILED DE: table 0\.1919\d*, provider 0\.19, off by 1\.00%/)
  const cert = JSON.parse(fs.readFileSync(certFile, 'utf8'))
  t.equal(cert.results.DE.ok, false)
  t.equal(cert.results.FR.ok, true)
  t.ok(await loaded(), 'the lane re-read table and certificate')
  await fleet.setFaults({ errorRate: 1 })
  const de = await quote('DE')
  t.equal(de.body.code, 'ERR_UNTESTED_COMPENSATION_REJECTED', 'DE is refused')
  t.match(de.body.detail, /DE rate failed certification/)
  t.equal(de!.headers['retry-after'], '5')
  const fr = await quote('FR')
  t.equal(fr.body.source, 'compensation', `FR still compensates ${JSON.stringify(fr.body)}`)
  await fleet.setFaults({ mode: 'normal' })
})

t.test('a stale certificate, or a table that does not match its checksum, is refused', async t => {
  writeTable({ ...base.rates })
  const monthAgo = new Date(Date.now() - 30 * 24 * 3_600_000)
  const old = await certify({ tableFile, providerUrl: fleet.sandbox.url, now: monthAgo })
  fs.writeFileSync(certFile, JSON.stringify(old))
  t.ok(await loaded())
  await fleet.setFaults({ errorRate: 1 })
  const stale = await quote('FR')
  t.equal(stale.body.code, 'ERR_UNTESTED_COMPENSATION_REJECTED')
  t.match(stale.body.detail, /older than/, 'stale certificate refused')

  await fleet.setFaults({ mode: 'normal' }) // certify against a healthy provider (a failing one fails every entry)
  fs.writeFileSync(certFile, JSON.stringify(await certify({ tableFile, providerUrl: fleet.sandbox.url })))
  t.ok(await loaded())
  await fleet.setFaults({ errorRate: 1 })
  const fresh = await quote('FR')
  t.equal(fresh.body.source, 'compensation', `a fresh certificate is accepted ${JSON.stringify(fresh.body)}`)
  writeTable({ ...base.rates, FR: 0.25 }, true) // edited by hand, checksum left as it was
  await eventually(async () => (await call(taxUrl + '/compensation')).body.detail.includes('checksum'), 8_000, 100)
  const tampered = await quote('FR')
  t.equal(tampered.body.code, 'ERR_UNTESTED_COMPENSATION_REJECTED')
  t.match(tampered.body.detail, /checksum/, 'checksum mismatch refused')
  t.equal((await db.query('select 1 from tax.quotes where rate = 0.25')).length, 0, 'the edited rate was never used')
  await fleet.setFaults({ mode: 'normal' })
})
