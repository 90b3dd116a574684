// Distributed tracing: W3C trace context across the fleet's hops and
// OpenTelemetry spans, off unless an OTLP endpoint is configured with the
// standard OTEL_* variables. Off, nothing of the SDK is loaded (it is imported
// on demand, tracing-sdk.ts) and every helper here returns at its first line;
// on, spans leave through a bounded batch queue: an exporter that cannot reach
// its collector drops them and never holds up a request.
import {
  propagation, ROOT_CONTEXT, trace, SpanKind, SpanStatusCode, TraceFlags,
  type Attributes, type Context, type Link, type Span, type SpanContext,
} from '@opentelemetry/api'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { Type, type Static } from 'typebox'
import { loadConfig } from './config.ts'
import type { Installed } from './tracing-sdk.ts'

export { SpanKind, SpanStatusCode, type Context, type Span, type SpanContext }

const SAMPLERS = [
  'always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio',
] as const
export type SamplerName = typeof SAMPLERS[number]

/** The standard OpenTelemetry variables the fleet reads (every long-running process). */
export const TRACING_SCHEMA = Type.Object({
  OTEL_SDK_DISABLED: Type.Boolean({ default: false, description: 'true: no tracing whatever else is set' }),
  OTEL_EXPORTER_OTLP_ENDPOINT: Type.String({ default: '', description: 'OTLP/HTTP base URL (spans go to <it>/v1/traces); tracing is on when this or the traces endpoint is set' }),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: Type.String({ default: '', description: 'OTLP/HTTP URL for spans, used as it is' }),
  OTEL_EXPORTER_OTLP_PROTOCOL: Type.Union([Type.Literal('http/json')], { default: 'http/json', description: 'the fleet exports OTLP over HTTP with JSON bodies' }),
  OTEL_SERVICE_NAME: Type.String({ default: '', description: 'the resource\'s service.name; default watertight-<process>' }),
  OTEL_TRACES_SAMPLER: Type.Union(SAMPLERS.map(s => Type.Literal(s)), { default: 'parentbased_always_on' }),
  OTEL_TRACES_SAMPLER_ARG: Type.Number({ default: 1, minimum: 0, maximum: 1, description: 'the ratio of the traceidratio samplers' }),
  OTEL_BSP_MAX_QUEUE_SIZE: Type.Integer({ default: 2_048, minimum: 1, maximum: 1_000_000, description: 'spans waiting for export; beyond, new ones are dropped' }),
  OTEL_BSP_SCHEDULE_DELAY: Type.Integer({ default: 5_000, minimum: 1, maximum: 600_000, description: 'ms between exports' }),
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: Type.Integer({ default: 512, minimum: 1, maximum: 1_000_000 }),
  OTEL_BSP_EXPORT_TIMEOUT: Type.Integer({ default: 30_000, minimum: 1, maximum: 600_000, description: 'ms an export may take before it is given up' }),
})

export type TracingConfig = Static<typeof TRACING_SCHEMA>

let installed: Installed | undefined

/**
 * Reads the OTEL_* variables (ERR_CONFIG_INVALID on a bad one) and, when an
 * endpoint is set, installs the SDK for this process. Call once, before the
 * process builds its app.
 */
export async function startTracing (
  processName: string, env: Record<string, string | undefined> = process.env
): Promise<boolean> {
  const cfg = loadConfig(TRACING_SCHEMA, env)
  if (cfg.OTEL_SDK_DISABLED || (cfg.OTEL_EXPORTER_OTLP_ENDPOINT === '' && cfg.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT === '')) return false
  if (installed) return true
  const sdk = await import('./tracing-sdk.ts')
  installed = sdk.install(cfg, cfg.OTEL_SERVICE_NAME || `watertight-${processName}`)
  return true
}

/** Exports what is queued (bounded by the exporter's timeout) and stops; for shutdown. */
export async function stopTracing (): Promise<void> {
  const i = installed
  installed = undefined
  await i?.shutdown().catch(() => {})
}

// Health, status and metrics are polled every second: never traced. The API's
// paths (/v1/...) are told apart by their second character before any pattern.
const OPS_PATH = /^\/(health\/|metrics|status)/
const traced = (url: string): boolean => url.charCodeAt(1) === 118 || !OPS_PATH.test(url)
const REQUEST_CONTEXT = Symbol('watertight.traceContext')
const REQUEST_SPAN = Symbol('watertight.requestSpan')
type Traced = FastifyRequest & { [REQUEST_CONTEXT]?: Context, [REQUEST_SPAN]?: Span }

/**
 * Traces the app's requests: a server span each, a child of the caller's
 * traceparent; a request its caller left out of the sample gets no span, only
 * the decision, passed on. Nothing when off.
 *
 * The trace context travels with the request object, and every helper below
 * takes it explicitly, rather than riding on AsyncLocalStorage: carrying a
 * context through every promise of a request cost ~10 µs of CPU per request
 * on a bare route (Node 20, 22 and 24 alike), sampled or not
 * (docs/benchmarks.md, "What tracing costs"). Ours rather than @fastify/otel
 * for the same reason: that plugin needs the context carried, and makes two
 * spans per request whether the trace is sampled or not.
 */
export function registerHttpTracing (app: FastifyInstance): void {
  if (!installed) return
  // Declared up front, as Fastify asks of request properties: every request keeps one shape.
  app.decorateRequest(REQUEST_CONTEXT as unknown as string, undefined)
  app.decorateRequest(REQUEST_SPAN as unknown as string, undefined)
  app.addHook('onRequest', (req, _reply, done) => {
    if (traced(req.url)) requestTrace(req as Traced)
    done()
  })
  app.addHook('onError', (req, _reply, err, done) => { failed((req as Traced)[REQUEST_SPAN], err); done() })
  app.addHook('onResponse', (req, reply, done) => {
    const span = (req as Traced)[REQUEST_SPAN]
    if (span) {
      span.setAttribute('http.response.status_code', reply.statusCode)
      if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
      span.end()
    }
    done()
  })
}

/**
 * The request's trace: a caller's sampled one continued with a server span, a
 * caller's unsampled one passed on as it came (no span, no SDK object: 99 of
 * 100 requests at 1%), or a new one the sampler decides on before any span is
 * made. A malformed traceparent is no trace: a new one starts.
 */
function requestTrace (req: Traced): void {
  const sdk = installed!
  const caller = parseTraceparent(req.headers.traceparent)
  if (caller && !caller.sampled) {
    req[REQUEST_CONTEXT] = new Unsampled(caller.traceparent, tracestateOf(req.headers.tracestate))
    return
  }
  let span: Span
  let parent = ROOT_CONTEXT
  if (caller) {
    parent = propagation.extract(ROOT_CONTEXT, req.headers)
    span = tracer().startSpan('request', requestSpanOptions(req), parent)
  } else {
    const root = sdk.newTrace()
    if (!root.sampled) {
      req[REQUEST_CONTEXT] = new Unsampled(root.traceparent, undefined)
      return
    }
    const distrusted = callerSpanContext(req)
    const links = distrusted ? [{ context: distrusted, attributes: { 'watertight.link': 'caller' } }] : []
    span = sdk.startRoot(root.traceId, 'request', { ...requestSpanOptions(req), links })
  }
  req[REQUEST_SPAN] = span
  req[REQUEST_CONTEXT] = trace.setSpan(parent, span)
}

// Made only for a span that is recorded: Fastify builds routeOptions anew on each read.
function requestSpanOptions (req: Traced): SpanOptions {
  return {
    kind: SpanKind.SERVER,
    attributes: {
      'http.request.method': req.method,
      'url.path': req.url.split('?')[0],
      ...(req.routeOptions.url ? { 'http.route': req.routeOptions.url } : {}),
      // The id every log line of the request carries: from a trace to its logs.
      'watertight.request_id': req.id,
    },
  }
}

// W3C traceparent: version-traceid-parentid-flags; a later version may add
// fields, version 00 may not; all-zero ids and version ff are invalid.
const TRACEPARENT = /^[ \t]*([\da-f]{2})-([\da-f]{32})-([\da-f]{16})-([\da-f]{2})(-.*)?[ \t]*$/
const ZERO_TRACE = '0'.repeat(32)
const ZERO_SPAN = '0'.repeat(16)

/**
 * A traceparent header's trace, as version 00 (how it is passed on); undefined
 * when absent or malformed. Exported for its test.
 */
export function parseTraceparent (h: unknown): { traceparent: string, sampled: boolean } | undefined {
  if (typeof h !== 'string') return undefined
  if (h.length === 55) return exactTraceparent(h)
  const m = TRACEPARENT.exec(h)
  if (!m || m[1] === 'ff' || m[2] === ZERO_TRACE || m[3] === ZERO_SPAN || (m[1] === '00' && m[5] !== undefined)) return undefined
  return { traceparent: `00-${m[2]}-${m[3]}-${m[4]}`, sampled: (parseInt(m[4]!, 16) & TraceFlags.SAMPLED) !== 0 }
}

// The form every hop of the fleet sends, 55 characters: at that length the
// regex above can only match without blanks or a fifth field, so this one
// accepts exactly what it does (its test holds the two together), and the
// match needs no parts: it is the traceparent passed on.
const EXACT_TRACEPARENT = /^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/

// parseTraceparent was ~0.8% of card-auth's CPU at 1% in its profile; in a loop,
// this form takes two thirds of the capturing match and the string built from its parts.
function exactTraceparent (h: string): { traceparent: string, sampled: boolean } | undefined {
  if (!EXACT_TRACEPARENT.test(h) || h.startsWith('ff') || h.startsWith(ZERO_TRACE, 3) || h.startsWith(ZERO_SPAN, 36)) return undefined
  const flags = h.charCodeAt(54)
  return {
    traceparent: h.startsWith('00') ? h : `00${h.slice(2)}`,
    sampled: ((flags <= 57 ? flags - 48 : flags - 87) & TraceFlags.SAMPLED) !== 0,
  }
}

// W3C allows a tracestate of 512 characters to be cut; one longer is dropped whole.
const tracestateOf = (h: unknown): string | undefined => typeof h === 'string' && h !== '' && h.length <= 512 ? h : undefined

/**
 * A trace left out of the sample: the traceparent (and tracestate) to pass on,
 * nothing else. A Context to the API, as the caller's remote span context.
 */
class Unsampled implements Context {
  #context: Context | undefined
  constructor (readonly traceparent: string, readonly tracestate: string | undefined) {}
  #asContext (): Context {
    this.#context ??= propagation.extract(ROOT_CONTEXT, this.carrier())
    return this.#context
  }

  carrier (): TraceCarrier {
    const { traceparent, tracestate } = this
    return tracestate ? { traceparent, tracestate } : { traceparent }
  }

  getValue (key: symbol): unknown { return this.#asContext().getValue(key) }
  setValue (key: symbol, value: unknown): Context { return this.#asContext().setValue(key, value) }
  deleteValue (key: symbol): Context { return this.#asContext().deleteValue(key) }
}

/** The request's trace context now (its innermost open span's); undefined when it is not traced. */
export function traceOf (req: FastifyRequest): Context | undefined {
  return (req as Traced)[REQUEST_CONTEXT]
}

/**
 * Runs fn with `span` as the request's innermost span (what the helpers called
 * with traceOf(req) nest under), then puts the request's context back. No span: fn alone.
 */
export function underSpan<T> (req: FastifyRequest, span: Span | undefined, fn: () => Promise<T>): Promise<T> {
  return span ? nested(req as Traced, span, fn) : fn()
}

async function nested<T> (r: Traced, span: Span, fn: () => Promise<T>): Promise<T> {
  const before = r[REQUEST_CONTEXT]
  r[REQUEST_CONTEXT] = trace.setSpan(before ?? ROOT_CONTEXT, span)
  try {
    return await fn()
  } finally {
    r[REQUEST_CONTEXT] = before
  }
}

/**
 * fn inside a span under the request's innermost one, and nested in it: what
 * fn starts with traceOf(req) goes under it. Ended when fn settles.
 */
export function inRequestSpan<T> (req: FastifyRequest, name: string, o: SpanOptions, fn: () => Promise<T>): Promise<T> {
  return inSpan(name, o, traceOf(req), span => underSpan(req, span, fn))
}

const tracer = () => trace.getTracer('watertight')

/**
 * Whether a span started under `ctx` could be recorded: its parent was sampled,
 * or it has none (the sampler decides). A request the sampler left out (99 of
 * 100 at 1%) gets none of the fleet's own spans: its children could only be
 * non-recording.
 */
function recordable (ctx: Context): boolean {
  if (ctx instanceof Unsampled) return false
  const parent = trace.getSpanContext(ctx)
  return parent === undefined || (parent.traceFlags & TraceFlags.SAMPLED) !== 0
}

/** Whether spans under `ctx` are recorded: tracing on, a trace, and sampled. */
export function sampled (ctx: Context | undefined): boolean {
  return installed !== undefined && ctx !== undefined && recordable(ctx)
}

export interface SpanOptions {
  kind?: SpanKind
  attributes?: Attributes
  links?: Link[]
}

/**
 * A span under `parent` that the caller ends; undefined when off, when there
 * is no trace context (an untraced request), or when the trace is not sampled.
 */
export function openSpan (name: string, o: SpanOptions, parent: Context | undefined): Span | undefined {
  return installed && parent !== undefined && recordable(parent) ? tracer().startSpan(name, o, parent) : undefined
}

/** fn inside a span under `parent` (ended when fn settles, an error recorded); without one, fn alone. */
export function inSpan<T> (
  name: string, o: SpanOptions, parent: Context | undefined, fn: (span: Span | undefined) => Promise<T>
): Promise<T> {
  const span = openSpan(name, o, parent)
  return span ? ended(span, fn) : fn(undefined)
}

async function ended<T> (span: Span, fn: (span: Span) => Promise<T>): Promise<T> {
  try {
    return await fn(span)
  } catch (err) {
    failed(span, err)
    throw err
  } finally {
    span.end()
  }
}

/**
 * A span for work that another process handed over with its trace context (a
 * job and the traceparent its payload carries): a child of that context, so
 * the request's sampling decision holds and its trace shows the work, with a
 * link to it as well; a new trace without one.
 */
export function inCarriedSpan<T> (
  name: string,
  carrier: { traceparent?: unknown, tracestate?: unknown } | undefined,
  o: SpanOptions,
  fn: (span: Span | undefined) => Promise<T>
): Promise<T> {
  if (!installed) return fn(undefined)
  const origin = carriedSpanContext(carrier)
  const parent = origin ? trace.setSpanContext(ROOT_CONTEXT, origin) : ROOT_CONTEXT
  const links = origin ? [{ context: origin, attributes: { 'watertight.link': 'enqueued-by' } }] : []
  return inSpan(name, { ...o, links: [...(o.links ?? []), ...links] }, parent, fn)
}

/** The context of a span, to start others under it (a batch's commit under a wait). */
export function contextOf (span: Span): Context {
  return trace.setSpan(ROOT_CONTEXT, span)
}

/** Marks a span failed with the error's message (and code, when it has one). */
export function failed (span: Span | undefined, err: unknown): void {
  if (!span) return
  const e = err as { message?: string, code?: string }
  span.setStatus({ code: SpanStatusCode.ERROR, message: e?.message ?? String(err) })
  if (e?.code) span.setAttribute('error.type', e.code)
}

/** Attributes on the request's innermost span; nothing when it is not traced or not sampled. */
export function annotate (req: FastifyRequest, attributes: Attributes): void {
  const ctx = traceOf(req)
  if (ctx && recordable(ctx)) trace.getSpan(ctx)?.setAttributes(attributes)
}

/**
 * A client span under `parent` for a call about to leave this process, its
 * traceparent put into the call's headers (so the callee's spans are its
 * children); the caller ends it. A trace left out of the sample gets no span,
 * but its decision goes along, so the callee leaves it out too.
 */
export function clientSpan (
  name: string, attributes: Attributes, headers: Record<string, string>, parent: Context | undefined
): Span | undefined {
  if (!installed || parent === undefined) return undefined
  if (parent instanceof Unsampled) {
    headers.traceparent = parent.traceparent
    if (parent.tracestate) headers.tracestate = parent.tracestate
    return undefined
  }
  if (!recordable(parent)) { propagation.inject(parent, headers); return undefined }
  const span = tracer().startSpan(name, { kind: SpanKind.CLIENT, attributes }, parent)
  propagation.inject(trace.setSpan(parent, span), headers)
  return span
}

/** Ends a client span with the status its call got (an error status from 500 up). */
export function endClientSpan (span: Span | undefined, status: number): void {
  if (!span) return
  span.setAttribute('http.response.status_code', status)
  if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
  span.end()
}

const CALLER = Symbol('watertight.callerTraceContext')
type WithCaller = FastifyRequest & { [CALLER]?: SpanContext }

/**
 * For callers not trusted with the trace: their traceparent starts a new trace
 * that links to theirs, rather than continuing it (their sampling decision and
 * trace id are not taken). Added before registerHttpTracing.
 */
export function distrustCallerTraceContext (app: FastifyInstance): void {
  if (!installed) return
  app.decorateRequest(CALLER as unknown as string, undefined)
  app.addHook('onRequest', (req, _reply, done) => {
    const { traceparent, tracestate } = req.headers
    if (traceparent !== undefined) {
      const sc = carriedSpanContext({ traceparent, tracestate })
      delete req.headers.traceparent
      delete req.headers.tracestate
      if (sc) (req as WithCaller)[CALLER] = sc
    }
    done()
  })
}

/** The trace context a distrusted caller sent (for the request span's link). */
function callerSpanContext (req: FastifyRequest): SpanContext | undefined {
  return (req as WithCaller)[CALLER]
}

/** W3C trace context as a job's payload carries it. */
export interface TraceCarrier { traceparent: string, tracestate?: string }

/** The W3C trace context a job payload carries for its span (the sampling decision with it); undefined when none. */
export function traceCarrier (parent: Context | undefined): TraceCarrier | undefined {
  if (!installed || parent === undefined) return undefined
  if (parent instanceof Unsampled) return parent.carrier()
  const c: Record<string, string> = {}
  propagation.inject(parent, c)
  if (!c.traceparent) return undefined
  return c.tracestate ? { traceparent: c.traceparent, tracestate: c.tracestate } : { traceparent: c.traceparent }
}

/** The span context a carrier (a job's `traceparent`) names, for a link; undefined when off or malformed. */
function carriedSpanContext (
  carrier: { traceparent?: unknown, tracestate?: unknown } | undefined
): SpanContext | undefined {
  if (!installed || typeof carrier?.traceparent !== 'string') return undefined
  const c: Record<string, string> = { traceparent: carrier.traceparent }
  if (typeof carrier.tracestate === 'string') c.tracestate = carrier.tracestate
  const sc = trace.getSpanContext(propagation.extract(ROOT_CONTEXT, c))
  return sc && trace.isSpanContextValid(sc) ? sc : undefined
}
