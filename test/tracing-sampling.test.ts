// Sampling, in one process against a real OTLP/HTTP receiver: a new trace is
// decided before any span is made, and one the sampler keeps is exported
// under the trace id the decision was made on; one it leaves out gets no span
// but its decision still goes on to the next hop. A caller's unsampled trace
// is passed on as it came, its tracestate too; a malformed traceparent starts
// a new trace.
import { trace } from '@opentelemetry/api'
import Fastify from 'fastify'
import t from 'tap'
import { clientSpan, endClientSpan, registerHttpTracing, startTracing, stopTracing, traceOf } from '../shared/tracing.ts'
import { eventually } from './helpers/http.ts'
import { startReceiver } from './helpers/otlp.ts'

const receiver = await startReceiver(t)
const on = await startTracing('sampling-test', {
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
  OTEL_TRACES_SAMPLER_ARG: '0.5',
  OTEL_BSP_SCHEDULE_DELAY: '50',
})
t.ok(on, 'tracing is on with an endpoint set')
t.teardown(stopTracing)

const app = Fastify()
registerHttpTracing(app)
// What the route would send to its next hop, and what the API sees of its trace.
app.get('/hop', async req => {
  const headers: Record<string, string> = {}
  const span = clientSpan('hop', {}, headers, traceOf(req))
  endClientSpan(span, 200)
  const sc = trace.getSpanContext(traceOf(req)!)
  const api = sc && { traceId: sc.traceId, spanId: sc.spanId, traceFlags: sc.traceFlags, isRemote: !!sc.isRemote }
  return { headers, api }
})
await app.ready()
t.teardown(() => app.close())

interface Hop {
  headers: { traceparent?: string, tracestate?: string }
  api?: { traceId: string, spanId: string, traceFlags: number, isRemote: boolean }
}
const hop = async (headers: Record<string, string> = {}): Promise<Hop> => (await app.inject({ url: '/hop', headers })).json()
const parts = (tp: string | undefined) => {
  const [, traceId, spanId, flags] = tp?.split('-') ?? []
  return { traceId: traceId!, spanId: spanId!, sampled: flags === '01' }
}

t.test('new traces: decided before any span, kept ones exported under the id decided on', async t => {
  const hops = await Promise.all(Array.from({ length: 200 }, () => hop()))
  const sent = hops.map(h => parts(h.headers.traceparent))
  t.ok(sent.every(s => /^[0-9a-f]{32}$/.test(s.traceId)), 'every request sent a traceparent on')
  const kept = sent.filter(s => s.sampled)
  const left = sent.filter(s => !s.sampled)
  t.ok(kept.length > 0 && left.length > 0, `at 0.5 some traces kept, some left out (${kept.length} / ${left.length})`)
  const arrived = await eventually(async () => kept.every(s => receiver.inTrace(s.traceId).length === 2), 10_000)
  t.ok(arrived, 'each kept trace exported its request span and its hop, under the trace id sent on')
  for (const s of kept.slice(0, 5)) {
    const spans = receiver.inTrace(s.traceId)
    const request = spans.find(x => x.name === 'request')
    t.equal(spans.find(x => x.name === 'hop')?.spanId, s.spanId, 'the next hop\'s parent is the hop span')
    t.equal(spans.find(x => x.name === 'hop')?.parentSpanId, request?.spanId, 'under the request span')
    t.equal(request?.parentSpanId, '', 'which is the trace\'s root')
  }
  t.same(left.flatMap(s => receiver.inTrace(s.traceId)), [], 'no span of a trace left out')
})

t.test('a caller\'s unsampled trace is passed on as it came, with its tracestate', async t => {
  const traceId = 'a1'.repeat(16)
  const traceparent = `00-${traceId}-${'b2'.repeat(8)}-00`
  const h = await hop({ traceparent, tracestate: 'v=1' })
  t.same(h.headers, { traceparent, tracestate: 'v=1' }, 'the next hop gets the caller\'s trace context')
  t.same(h.api, { traceId, spanId: 'b2'.repeat(8), traceFlags: 0, isRemote: true }, 'the API sees the caller\'s span context')
  const later = await hop({ traceparent: `00-${'c3'.repeat(16)}-${'d4'.repeat(8)}-01` })
  t.equal(parts(later.headers.traceparent).traceId, 'c3'.repeat(16), 'a sampled caller after it is continued')
  const after = await eventually(async () => receiver.inTrace('c3'.repeat(16)).length === 2, 10_000)
  t.ok(after, 'and recorded')
  t.same(receiver.inTrace(traceId), [], 'the unsampled one never was')
})

t.test('a malformed traceparent starts a new trace', async t => {
  const bad = [
    `00-${'0'.repeat(32)}-${'b2'.repeat(8)}-01`, // an all-zero trace id
    `00-${'a1'.repeat(16)}-${'0'.repeat(16)}-01`, // an all-zero parent id
    `ff-${'a1'.repeat(16)}-${'b2'.repeat(8)}-01`, // version ff
    `00-${'A1'.repeat(16)}-${'b2'.repeat(8)}-01`, // upper case
    `00-${'a1'.repeat(16)}-${'b2'.repeat(8)}-01-extra`, // version 00 with a fifth field
    'garbage',
  ]
  for (const traceparent of bad) {
    const h = await hop({ traceparent })
    const sent = parts(h.headers.traceparent)
    t.ok(sent.traceId !== 'a1'.repeat(16) && /^[0-9a-f]{32}$/.test(sent.traceId) && sent.traceId !== '0'.repeat(32),
      `${traceparent}: a new trace id`)
  }
  const later = await hop({ traceparent: `01-${'e5'.repeat(16)}-${'f6'.repeat(8)}-00-what-comes-later` })
  t.same(later.headers, { traceparent: `00-${'e5'.repeat(16)}-${'f6'.repeat(8)}-00` }, 'a later version is read as 00 and passed on as 00')
})
