// Sampling, in one process against a real OTLP/HTTP receiver: a new trace is
// decided before any span is made, and one the sampler keeps is exported
// under the trace id the decision was made on; one it leaves out gets no span
// but its decision still goes on to the next hop. A caller's unsampled trace
// is passed on as it came, its tracestate too; a malformed traceparent starts
// a new trace. The fast paths under these (the root decision made on our own
// random ids, the 55-character traceparent read by a simpler pattern) are held
// to what the SDK's sampler and the full grammar decide.
import { ROOT_CONTEXT, SpanKind, trace } from '@opentelemetry/api'
import { SamplingDecision } from '@opentelemetry/sdk-trace'
import Fastify from 'fastify'
import { randomBytes } from 'node:crypto'
import t from 'tap'
import { newTrace, rootDecision, sampler } from '../shared/tracing-sdk.ts'
import {
  clientSpan, endClientSpan, parseTraceparent, registerHttpTracing, startTracing, stopTracing, traceOf,
  type SamplerName,
} from '../shared/tracing.ts'
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
// Whether a path is traced at all: the polled ones (health, status, metrics) never are.
for (const url of ['/health/ready', '/status', '/metrics', '/v1/thing', '/hello']) app.get(url, async req => ({ traced: traceOf(req) !== undefined }))
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

t.test('the polled paths are never traced, every other one is', async t => {
  for (const url of ['/health/ready', '/status', '/metrics']) t.same((await app.inject({ url })).json(), { traced: false }, url)
  for (const url of ['/v1/thing', '/hello']) t.same((await app.inject({ url })).json(), { traced: true }, url)
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

// The regex alone, as parseTraceparent read every traceparent before its
// 55-character form got a path of its own: the two must agree on every input.
const REFERENCE = /^[ \t]*([\da-f]{2})-([\da-f]{32})-([\da-f]{16})-([\da-f]{2})(-.*)?[ \t]*$/
function referenceParse (h: string): { traceparent: string, sampled: boolean } | undefined {
  const m = REFERENCE.exec(h)
  if (!m || m[1] === 'ff' || m[2] === '0'.repeat(32) || m[3] === '0'.repeat(16) || (m[1] === '00' && m[5] !== undefined)) return undefined
  return { traceparent: `00-${m[2]}-${m[3]}-${m[4]}`, sampled: (parseInt(m[4]!, 16) & 1) !== 0 }
}

t.test('the 55-character traceparent is read as the full grammar reads it', async t => {
  const hex = (n: number): string => randomBytes(n).toString('hex')
  const valid = (): string => `00-${hex(16)}-${hex(8)}-${hex(1)}`
  const inputs = [
    `01-${'a1'.repeat(16)}-${'b2'.repeat(8)}-01`, `ff-${'a1'.repeat(16)}-${'b2'.repeat(8)}-01`,
    `00-${'0'.repeat(32)}-${'b2'.repeat(8)}-01`, `00-${'a1'.repeat(16)}-${'0'.repeat(16)}-01`,
    ` 00-${'a1'.repeat(16)}-${'b2'.repeat(8)}-01`, `00-${'a1'.repeat(16)}-${'b2'.repeat(8)}-01\t`,
    `00-${'a1'.repeat(16)}-${'b2'.repeat(8)}-0f`, `00-${'a1'.repeat(16)}-${'b2'.repeat(8)}-fe`,
  ]
  // Every valid one, then each with one character changed for one the grammar may or may not take.
  const swaps = ['A', 'F', 'g', '-', ' ', '\t', '0', 'f', 'z', '_']
  for (let i = 0; i < 2_000; i++) {
    const v = valid()
    inputs.push(v)
    const at = i % 55
    inputs.push(v.slice(0, at) + swaps[i % swaps.length] + v.slice(at + 1))
  }
  let differ = 0
  for (const h of inputs) if (JSON.stringify(parseTraceparent(h)) !== JSON.stringify(referenceParse(h))) differ++
  t.equal(differ, 0, `${inputs.length} inputs, the same answer from both`)
  t.ok(inputs.filter(h => h.length === 55 && referenceParse(h) === undefined).length > 500, 'many of them malformed at that length')
})

t.test('a new trace\'s root decision is the SDK sampler\'s, on the same id', async t => {
  const cases: Array<[SamplerName, number]> = [
    ['parentbased_traceidratio', 0.01], ['traceidratio', 0.5], ['parentbased_traceidratio', 0], ['traceidratio', 1],
    ['parentbased_always_on', 0.3], ['always_off', 1],
  ]
  for (const [name, ratio] of cases) {
    const decide = rootDecision(name, ratio)
    const sdk = sampler(name, ratio)
    const ids = randomBytes(16 * 20_000)
    let differ = 0
    let kept = 0
    for (let at = 0; at < ids.length; at += 16) {
      const ours = decide(ids, at)
      const theirs = sdk.shouldSample(ROOT_CONTEXT, ids.toString('hex', at, at + 16), 'request', SpanKind.SERVER, {}, []).decision !== SamplingDecision.NOT_RECORD
      if (ours !== theirs) differ++
      if (ours) kept++
    }
    t.equal(differ, 0, `${name} at ${ratio}: the same decision on 20,000 ids (${kept} kept)`)
  }
  const decide = rootDecision('parentbased_traceidratio', 0.25)
  const traces = Array.from({ length: 4_000 }, () => newTrace(decide))
  const ids = traces.map(x => x.sampled ? x.traceId : x.traceparent.slice(3, 35))
  t.ok(ids.every(id => /^[\da-f]{32}$/.test(id) && id !== '0'.repeat(32)), 'every new trace id valid')
  t.equal(new Set(ids).size, ids.length, 'and new')
  t.ok(traces.every(x => x.sampled || referenceParse(x.traceparent)?.sampled === false), 'a trace left out passes on a valid traceparent, not sampled')
  const kept = traces.filter(x => x.sampled).length
  t.ok(kept > 500 && kept < 1_500, `about a quarter kept at 0.25 (${kept} of 4,000)`)
})
