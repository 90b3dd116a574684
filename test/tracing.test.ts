// Tracing, on: the fleet's own processes (bundled, as they run in production)
// export OTLP/HTTP to a real receiver this test starts. One authorization is
// one trace from the caller's traceparent through the gateway, the lane, its
// permit and its commit, with no tax span in it; a queued fraud screening's job
// runs in its request's trace; a caller's unsampled trace reaches the job
// unrecorded; a compensated tax quote shows the failed provider call and its
// statement; a malformed traceparent starts a new trace; with the collector
// gone, requests are answered as before.
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { certify } from '../services/tax/compensation/certify.ts'
import { DEFAULT_TABLE_FILE } from '../services/tax/compensation/table.ts'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually } from './helpers/http.ts'
import { startReceiver, type ReceivedSpan } from './helpers/otlp.ts'
import { startWorker } from './helpers/queue.ts'

const receiver = await startReceiver(t)
// Exports every 100 ms, so a test waits on spans for a fraction of a second.
const otel = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '100', OTEL_EXPORTER_OTLP_TIMEOUT: '10000' }
// A fraud lane that overflows to its queue under a burst (as test/serial/fraud-overflow.test.ts).
const fraud = { FRAUD_PERMITS: '2', FRAUD_QUEUE: '1', FRAUD_QUEUE_WAIT_MS: '20' }
// The tax lane compensates only from a certified table: certified against the sandbox below.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-trace-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const certFile = path.join(dir, 'certificate.json')
const db = await testDatabase(t, fraud)
await db.query(`insert into card_auth.card_accounts (token, currency, available, status)
  values ('tok_trace', 'EUR', 1000000, 'active')`)
const fleet = await startFleet(t, db, { env: { ...otel, ...fraud, TAX_CERTIFICATE_FILE: certFile } })
const certificate = await certify({ tableFile: DEFAULT_TABLE_FILE, providerUrl: fleet.sandbox.url })
fs.writeFileSync(certFile, JSON.stringify(certificate))

const hex = (bytes: number): string => crypto.randomBytes(bytes).toString('hex')
/** A caller's trace context: its trace id, its span's id and the header that carries them. */
function caller (): { traceId: string, spanId: string, traceparent: string } {
  const traceId = hex(16)
  const spanId = hex(8)
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` }
}

const named = (spans: ReceivedSpan[], service: string, name: string): ReceivedSpan | undefined =>
  spans.find(s => s.service === `watertight-${service}` && s.name === name)
/** Whether `s` descends from the span `ancestorId` inside its trace. */
function descends (spans: ReceivedSpan[], s: ReceivedSpan | undefined, ancestorId: string | undefined): boolean {
  const byId = new Map(spans.map(x => [x.spanId, x]))
  for (let p = s?.parentSpanId; p; p = byId.get(p)?.parentSpanId) if (p === ancestorId) return true
  return false
}

/** The spans of a trace once it holds each of `parts` ([service, span name]); undefined if not within `ms`. */
const traceHolding = async (traceId: string, parts: Array<[string, string]>, ms = 10_000) => eventually(async () => {
  const s = receiver.inTrace(traceId)
  return parts.every(([service, name]) => named(s, service, name)) ? s : undefined
}, ms)

/** 30 screenings at once from `merchantId`, the i-th with `headers(i)`: enough to overflow a 2-permit lane. */
const screeningBurst = (merchantId: string, base: number, headers: (i: number) => Record<string, string>) =>
  Promise.all(Array.from({ length: 30 }, (_x, i) => fleet.post('/v1/fraud/screenings',
    { cardToken: `tok_fraud_${i % 7}`, merchantId, amount: { value: base + i, currency: 'EUR' } }, undefined, headers(i))))

const authorize = (headers: Record<string, string> = {}) => fleet.post('/v1/authorizations',
  { merchantId: 'm_trace', cardToken: 'tok_trace', amount: { value: 100, currency: 'EUR' } }, undefined, headers)

t.test('one authorization during a tax brownout is one trace: the caller\'s, through gateway, lane, permit and commit', async t => {
  // The provider answers in 3 s, past the quote's 2 s deadline: a quote holds a tax permit
  // while the authorization runs.
  await fleet.setFaults({ latencyMs: 3_000 })
  t.teardown(() => fleet.setFaults({}))
  const quoteId = `trace-quote-${hex(4)}`
  const quoteBody = { jurisdiction: 'DE', amount: { value: 10_000, currency: 'EUR' } }
  const quote = fleet.post('/v1/tax/quotes', quoteBody, undefined, { 'x-request-id': quoteId })
  const held = await eventually(async () => (await fleet.status('tax')).active > 0, 5_000, 20)
  t.ok(held, 'a quote holds a tax permit, waiting on the slow provider')
  const c = caller()
  const r = await authorize({ traceparent: c.traceparent })
  t.equal(r.status, 201)
  t.equal((await quote).headers['x-tax-compensation'], 'provider_deadline', 'the quote was answered from the table after the deadline')
  const spans = await traceHolding(c.traceId, [['card-auth', 'card-auth-writer commit'], ['gateway', 'request']])
  if (!spans) { t.fail('the trace reached the receiver'); return }
  const gw = named(spans, 'gateway', 'request')!
  t.equal(gw.parentSpanId, c.spanId, 'the gateway continued the caller\'s trace: its span is a child of the caller\'s')
  t.equal(gw.kind, 2, 'a server span')
  t.equal(gw.attributes['http.response.status_code'], 201)
  const hop = named(spans, 'gateway', 'lane card-auth')
  t.equal(hop?.kind, 3, 'the hop to the lane is a client span')
  t.ok(descends(spans, hop, gw.spanId), 'inside the gateway\'s request')
  const lane = named(spans, 'card-auth', 'request')
  t.equal(lane?.parentSpanId, hop?.spanId, 'the lane\'s request span is a child of the gateway\'s hop (traceparent sent along)')
  const admission = named(spans, 'card-auth', 'bulkhead.admission')
  t.match(admission?.attributes, { 'watertight.lane': 'card-auth', 'watertight.bulkhead.decision': 'admitted' }, 'the permit: admitted')
  t.ok(descends(spans, admission, lane?.spanId), 'inside the lane\'s request')
  const exec = named(spans, 'card-auth', 'bulkhead.execution')
  t.ok(descends(spans, exec, lane?.spanId) && typeof exec?.attributes['watertight.deadline_ms'] === 'number', 'the execution, with its deadline')
  const wait = named(spans, 'card-auth', 'card-auth-writer wait')
  t.ok(descends(spans, wait, exec?.spanId), 'the wait for the group commit, inside the execution')
  const commit = named(spans, 'card-auth', 'card-auth-writer commit')
  t.equal(commit?.parentSpanId, wait?.spanId, 'the batch\'s commit, under the wait of the request it carried first')
  t.equal(commit?.attributes['watertight.batch.size'], 1)
  t.same(spans.filter(s => s.service === 'watertight-tax'), [], 'no tax span anywhere in the authorization\'s trace')
  t.ok(spans.every(s => s.status !== 2), 'no span failed')
  // The brownout was traced too, in the quote's own trace: its provider call missed the deadline.
  const quoteTrace = await eventually(async () => {
    const gw = receiver.spans.find(s => s.service === 'watertight-gateway' && s.attributes['watertight.request_id'] === quoteId)
    const provider = gw && named(receiver.inTrace(gw.traceId), 'tax', 'tax provider quote')
    return provider ? { gw, provider } : undefined
  }, 10_000)
  t.equal(quoteTrace?.provider.attributes['watertight.provider.failure'], 'deadline', 'the quote\'s trace shows the provider call that missed its deadline')
  t.not(quoteTrace?.gw.traceId, c.traceId, 'in a trace of its own')
})

t.test('a malformed traceparent starts a new trace, and is no error', async t => {
  const id = `trace-bad-${hex(4)}`
  const r = await authorize({ traceparent: 'not-a-trace-context', 'x-request-id': id })
  t.equal(r.status, 201)
  const gw = await eventually(async () => receiver.spans.find(s =>
    s.service === 'watertight-gateway' && s.name === 'request' && s.attributes['watertight.request_id'] === id), 10_000)
  if (!gw) { t.fail('the request was traced'); return }
  t.equal(gw.parentSpanId, '', 'a root span: nothing was continued')
  t.match(gw.traceId, /^[0-9a-f]{32}$/, 'with a trace id of its own')
  t.not(gw.traceId, '0'.repeat(32))
})

t.test('a caller\'s unsampled trace is passed on, never recorded: its queued screenings\' jobs carry it', async t => {
  const tracestate = 'vendor=t61rcWkgMzE,other=1'
  const sent = Array.from({ length: 30 }, () => {
    const c = caller()
    return { traceId: c.traceId, traceparent: c.traceparent.replace(/-01$/, '-00') }
  })
  const rs = await screeningBurst('m_u', 2_000, i => ({ traceparent: sent[i]!.traceparent, tracestate }))
  t.ok(rs.every(r => r.status === 200 || r.status === 202), 'every screening answered: screened, or queued')
  const queued = sent.map((s, i) => ({ ...s, id: rs[i]!.body.id as string })).filter((_s, i) => rs[i]!.status === 202)
  if (!t.ok(queued.length > 0, `some screenings overflowed to the queue (${rs.map(r => r.status).join(',')})`)) return
  const jobs = await db.query<{ payload: { screeningId: string, traceparent?: string, tracestate?: string } }>(
    "select payload from jobs.jobs_hot where payload->>'screeningId' = any($1)", [queued.map(q => q.id)])
  t.equal(jobs.length, queued.length, 'a job for each queued screening')
  const byId = new Map(jobs.map(j => [j.payload.screeningId, j.payload]))
  t.ok(queued.every(q => byId.get(q.id)?.traceparent?.startsWith(`00-${q.traceId}-`) && byId.get(q.id)?.traceparent?.endsWith('-00')),
    'each job carries its request\'s trace id, still not sampled')
  t.ok(queued.every(q => byId.get(q.id)?.tracestate === tracestate), 'and the caller\'s tracestate')
  // A sampled screening after them: once its spans are in, any span of theirs
  // would be too (each process exports its spans in the order they ended).
  const marker = caller()
  await fleet.post('/v1/fraud/screenings', { cardToken: 'tok_fraud_marker', merchantId: 'm_u', amount: { value: 1, currency: 'EUR' } },
    undefined, { traceparent: marker.traceparent })
  const markerIn = await traceHolding(marker.traceId, [['gateway', 'request'], ['fraud', 'request']])
  t.ok(markerIn, 'the sampled screening after them was recorded, in the gateway and the lane')
  t.same(sent.flatMap(s => receiver.inTrace(s.traceId)), [], 'no span of the unsampled requests, in any process')
})

t.test('a queued fraud screening: its job runs in the request\'s trace, linked to the span that queued it', async t => {
  const sent = Array.from({ length: 30 }, () => caller())
  const rs = await screeningBurst('m_f', 1_000, i => ({ traceparent: sent[i]!.traceparent }))
  const queued = sent.filter((_s, i) => rs[i]!.status === 202)
  if (!t.ok(queued.length > 0, `some screenings overflowed to the queue (${rs.map(r => r.status).join(',')})`)) return
  await startWorker(t, db, ['fraud-async'], { ...fraud, ...otel, FRAUD_DATABASE_URL: db.laneUrl('fraud', fraud) })
  const one = queued[0]!
  const spans = await traceHolding(one.traceId, [['worker', 'job fraud.score'], ['fraud', 'bulkhead.admission']], 20_000)
  if (!spans) { t.fail('the job\'s span reached the receiver in the request\'s trace'); return }
  const admission = named(spans, 'fraud', 'bulkhead.admission')!
  t.match(admission.attributes, { 'watertight.bulkhead.decision': 'rejected', 'watertight.bulkhead.answer': 'overflowed' },
    'the admission decided: rejected, answered by queueing')
  t.ok(descends(spans, named(spans, 'fraud', 'fraud-overflow-writer wait'), admission.spanId), 'the screening\'s commit wait, inside the admission')
  const job = named(spans, 'worker', 'job fraud.score')!
  t.equal(job.kind, 5, 'a consumer span')
  t.equal(job.attributes['watertight.job.queue'], 'fraud-async')
  t.equal(job.parentSpanId, admission.spanId, 'a child of the span that queued it')
  t.match(job.links, [{ traceId: one.traceId, spanId: admission.spanId, attributes: { 'watertight.link': 'enqueued-by' } }], 'and linked to it')
})

t.test('a compensated tax quote: the failed provider call and the compensation in its trace', async t => {
  const certified = await eventually(async () => (await call(fleet.lanes.tax!.url + '/compensation')).body.certified === true, 8_000, 100)
  t.ok(certified, 'the tax lane holds a certified table')
  await fleet.setFaults({ errorRate: 1 })
  t.teardown(() => fleet.setFaults({}))
  const c = caller()
  const r = await fleet.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 10_000, currency: 'EUR' } }, undefined, { traceparent: c.traceparent })
  t.equal(r.status, 200)
  t.equal(r.headers['x-tax-compensation'], 'provider_error', 'answered from the certified table')
  const spans = await traceHolding(c.traceId, [['tax', 'tax provider quote'], ['tax', 'bulkhead.execution']])
  if (!spans) { t.fail('the quote\'s trace reached the receiver'); return }
  const provider = named(spans, 'tax', 'tax provider quote')!
  t.equal(provider.kind, 3, 'the provider call is a client span')
  t.equal(provider.status, 2, 'failed')
  t.equal(provider.attributes['watertight.provider.failure'], 'error')
  const exec = named(spans, 'tax', 'bulkhead.execution')!
  t.ok(descends(spans, provider, exec.spanId), 'inside the execution that held the permit')
  t.equal(exec.attributes['watertight.tax.compensation'], 'provider_error', 'the execution says why it compensated')
  const statement = named(spans, 'tax', 'db tax-store-compensated')
  t.match(statement, { kind: 3, attributes: { 'db.system.name': 'postgresql', 'db.operation.name': 'WITH' } },
    'the statement that stored the quote and queued its reconcile job is a client span')
  t.ok(descends(spans, statement, exec.spanId), 'inside the execution')
  t.match(statement?.attributes['db.query.text'], /jobs\.enqueue\(/, 'with its text')
})

t.test('with the collector hung, then down, requests are answered as before', async t => {
  const before = receiver.exports
  const twenty = async (): Promise<number[]> =>
    (await Promise.all(Array.from({ length: 20 }, () => authorize()))).map(r => r.status)
  const failures = (): number => fleet.gateway.log.filter(l => l.includes('"msg":"otel: ')).length
  const exportFailed = async (n: number): Promise<boolean> => eventually(async () => failures() >= n, 30_000, 100)
  // Hung: an export waits its whole OTEL_EXPORTER_OTLP_TIMEOUT (10 s) for an answer that never comes.
  receiver.hang()
  await authorize()
  const gatewayHeld = await eventually(async () => receiver.holding().includes('watertight-gateway'), 10_000, 20)
  t.ok(gatewayHeld, 'the gateway\'s export is held by the hung collector')
  t.same(await twenty(), Array(20).fill(201), 'every authorization approved while the collector hangs')
  // Shown by order, not by a clock: all twenty were answered while that export still waited.
  t.ok(receiver.holding().includes('watertight-gateway') && failures() === 0,
    'answered while the gateway\'s export still hung, before its exporter gave up')
  t.ok(await exportFailed(1), 'the gateway said, in one line, that an export failed')
  t.same(await twenty(), Array(20).fill(201), 'and after an export timed out')
  // Down: every connection refused at once.
  const failed = failures()
  await receiver.close()
  t.same(await twenty(), Array(20).fill(201), 'every authorization approved with the collector down')
  t.ok(await exportFailed(failed + 1), 'and the failed export said so')
  t.equal(receiver.exports, before, 'no export got through once it hung')
})
