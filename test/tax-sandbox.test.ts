// The tax sandbox: sales-tax rates with their effective dates, and fault
// injection through PUT/GET/DELETE /faults (latency, jitter, errors, hang, reset), and the
// calls under each setting by caller (GET /faults/calls).
import t from 'tap'
import { buildApp } from '../services/tax-sandbox/app.ts'
import { rateFor } from '../services/tax-sandbox/rates.ts'
import { call } from './helpers/http.ts'

t.test('rates follow the package data and its effective dates', async t => {
  t.same(rateFor('DE'), { jurisdiction: 'DE', rate: 0.19, currency: 'EUR' })
  t.equal(rateFor('DE', new Date('2020-09-01'))?.rate, 0.16, 'the German VAT cut of 2020 applies in its window')
  t.equal(rateFor('CA-QC')?.rate, 0.14975, 'GST plus QST')
  t.equal(rateFor('US-TX')?.rate, 0.0625)
  t.equal(rateFor('XX'), undefined)
  t.equal(rateFor('US-ZZ'), undefined)
})

t.test('fault injection', async t => {
  const app = buildApp()
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  const q = (signal?: AbortSignal) => call(url + '/v1/rates/quote', { json: { jurisdiction: 'FR', amount: { value: 10_000, currency: 'EUR' } }, signal })
  t.same((await q()).body, { jurisdiction: 'FR', rate: 0.2, tax: 2000 })
  t.equal((await call(url + '/v1/rates/quote', { json: { jurisdiction: 'US-ZZ', amount: { value: 1, currency: 'USD' } } })).body.code, 'ERR_UNKNOWN_JURISDICTION')

  t.same((await call(url + '/faults', { method: 'PUT', json: { latencyMs: 150, jitterMs: 50 } })).body, { latencyMs: 150, jitterMs: 50, errorRate: 0, mode: 'normal' })
  const slow = await q()
  t.ok(slow.ms >= 150 - 5, `answered no sooner than the injected latency (${slow.ms.toFixed(0)} ms)`)
  t.equal((await call(url + '/faults')).body.latencyMs, 150)

  await call(url + '/faults', { method: 'PUT', json: { errorRate: 1 } })
  t.equal((await q()).status, 500, 'injected error')
  await call(url + '/faults', { method: 'PUT', json: { mode: 'reset' } })
  await t.rejects(q(), 'connection reset')
  await call(url + '/faults', { method: 'PUT', json: { mode: 'hang' } })
  await t.rejects(q(AbortSignal.timeout(300)), 'hang: never answers')
  t.equal((await call(url + '/faults', { method: 'PUT', json: { mode: 'sideways' } })).body.code, 'ERR_VALIDATION')
  t.same((await call(url + '/faults', { method: 'DELETE' })).body, { latencyMs: 0, jitterMs: 0, errorRate: 0, mode: 'normal' })
  t.equal((await q()).status, 200, 'back to normal')
})

t.test('the calls under each setting of the faults, by caller (its User-Agent)', async t => {
  const app = buildApp()
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  const q = (ua: string) => call(url + '/v1/rates/quote', { json: { jurisdiction: 'FR', amount: { value: 100, currency: 'EUR' } }, headers: { 'user-agent': ua } })
  await q('watertight-tax')
  await call(url + '/faults', { method: 'PUT', json: { latencyMs: 20 } })
  for (const ua of ['watertight-tax', 'watertight-tax', 'watertight-tax (probe)', 'watertight-worker-tax', 'watertight-worker-tax (probe)', 'curl/8']) await q(ua)
  await call(url + '/faults', { method: 'DELETE' })
  await q('watertight-tax')
  const { current, previous } = (await call(url + '/faults/calls')).body
  t.same(previous.faults, { latencyMs: 20, jitterMs: 0, errorRate: 0, mode: 'normal' }, 'the setting before: the fault')
  t.same(previous.byCaller, { tax: 2, 'tax probe': 1, 'worker-tax': 1, 'worker-tax probe': 1, other: 1 }, 'the calls that arrived while it was on, and only those')
  t.same(current.byCaller, { tax: 1 }, 'and since it was cleared')
})
