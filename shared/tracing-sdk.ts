// The OpenTelemetry SDK of a process that traces, imported by tracing.ts only
// when an endpoint is configured (a chunk of its own in the bundle: a process
// that does not trace never loads it). Spans are batched in a bounded queue
// and exported over OTLP/HTTP; W3C trace context is the propagation format. No
// context manager: the fleet passes trace contexts explicitly (tracing.ts).
import { diag, DiagLogLevel, propagation, trace } from '@opentelemetry/api'
import { randomFillSync } from 'node:crypto'
import { setGlobalErrorHandler, W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, RandomIdGenerator,
  TraceIdRatioBasedSampler, TracerProvider, type IdGenerator, type Sampler,
} from '@opentelemetry/sdk-trace'
import { ROOT_CONTEXT, type Span, type SpanOptions } from '@opentelemetry/api'
import type { SamplerName, TracingConfig } from './tracing.ts'

/** What a sampler decides a new trace by: its name without `parentbased_`. */
const rootOf = (name: SamplerName): 'always_on' | 'always_off' | 'traceidratio' =>
  name.endsWith('always_on') ? 'always_on' : name.endsWith('always_off') ? 'always_off' : 'traceidratio'

export function sampler (name: SamplerName, ratio: number): Sampler {
  const kind = rootOf(name)
  const root = kind === 'always_on'
    ? new AlwaysOnSampler()
    : kind === 'always_off' ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(ratio)
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root
}

/**
 * A new trace's root decision under the sampler `name` at `ratio`, made on its
 * id (16 bytes of `b` from `at`) as the SDK's sampler makes it: always, never,
 * or TraceIdRatioBasedSampler's test, the id's four 32-bit words XORed against
 * the ratio's share of 2^32. A test holds it to the SDK's own decision.
 */
export function rootDecision (name: SamplerName, ratio: number): (b: Buffer, at: number) => boolean {
  const kind = rootOf(name)
  if (kind === 'always_on') return () => true
  if (kind === 'always_off') return () => false
  const r = Number.isNaN(ratio) || ratio <= 0 ? 0 : Math.min(ratio, 1)
  const bound = r === 1 ? 0x100000000 : Math.floor(r * 0xffffffff)
  return (b, at) =>
    ((b.readUInt32BE(at) ^ b.readUInt32BE(at + 4) ^ b.readUInt32BE(at + 8) ^ b.readUInt32BE(at + 12)) >>> 0) < bound
}

// New traces' ids, 24 random bytes each (the trace id and, for one left out of
// the sample, the parent id passed on), from a pool refilled and turned into hex
// 256 traces at a time. The SDK's generator and a call of its sampler for every
// request the gateway starts a trace for came to ~1.5% of the gateway's CPU in
// its profile at 1%.
const POOL = Buffer.allocUnsafe(24 * 256)
let hex = ''
let drawn = POOL.length

function refill (): void {
  randomFillSync(POOL)
  for (let at = 0; at < POOL.length; at += 24) {
    // All-zero ids are invalid (W3C), as unlikely as they are.
    const w = (k: number): number => POOL.readUInt32BE(at + 4 * k)
    if ((w(0) | w(1) | w(2) | w(3)) === 0) POOL[at + 15] = 1
    if ((w(4) | w(5)) === 0) POOL[at + 23] = 1
  }
  hex = POOL.toString('hex')
  drawn = 0
}

/** A new trace: the id it is kept under, or the traceparent that passes on its being left out. */
export type NewTrace = { sampled: true, traceId: string } | { sampled: false, traceparent: string }

export function newTrace (decide: (b: Buffer, at: number) => boolean): NewTrace {
  if (drawn === POOL.length) refill()
  const at = drawn
  drawn += 24
  const traceId = hex.slice(2 * at, 2 * at + 32)
  return decide(POOL, at)
    ? { sampled: true, traceId }
    : { sampled: false, traceparent: `00-${traceId}-${hex.slice(2 * at + 32, 2 * at + 48)}-00` }
}

/**
 * The SDK's random ids, except that a new trace's id can be chosen before its
 * first span: a new trace is decided on before any span is made (newTrace; a
 * trace left out gets none), and a trace kept must keep the id decided on.
 */
class ChosenTraceIds implements IdGenerator {
  readonly #random = new RandomIdGenerator()
  chosen: string | undefined
  generateTraceId = (): string => {
    const id = this.chosen ?? this.#random.generateTraceId()
    this.chosen = undefined
    return id
  }

  generateSpanId = (): string => this.#random.generateSpanId()
}

/** What tracing.ts uses of the SDK beyond the global API. */
export interface Installed {
  shutdown (): Promise<void>
  /** A new trace, decided on by the sampler's root (a root request span's decision), before any span. */
  newTrace (): NewTrace
  /** A new trace's first span, with the id its sampling was decided on. */
  startRoot (traceId: string, name: string, o: SpanOptions): Span
}

export function install (cfg: TracingConfig, serviceName: string): Installed {
  // The SDK's own complaints, a failed export above all, as one log line each
  // (as the process's logger writes them), errors only: never a stack trace, and
  // a collector that is down costs a line per export, not a flood.
  const say = (msg: string, code?: unknown): void => {
    console.error(JSON.stringify({ level: 50, time: Date.now(), name: serviceName, msg: `otel: ${msg}`, ...(code ? { code } : {}) }))
  }
  setGlobalErrorHandler(err => {
    const e = err as { message?: string, code?: unknown }
    say(`span export failed: ${e?.message ?? String(err)}`, e?.code)
  })
  diag.setLogger({
    error: (m: string) => say(m.split('\n')[0]!),
    warn: () => {},
    info: () => {},
    debug: () => {},
    verbose: () => {},
  }, DiagLogLevel.ERROR)
  // The URL from the validated settings, not left to the exporter's own read of
  // process.env: the base endpoint gets the signal's path, as the spec has it.
  const url = cfg.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || `${cfg.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/+$/, '')}/v1/traces`
  const exporter = new OTLPTraceExporter({ url })
  const ids = new ChosenTraceIds()
  const chosen = sampler(cfg.OTEL_TRACES_SAMPLER as SamplerName, cfg.OTEL_TRACES_SAMPLER_ARG)
  const decide = rootDecision(cfg.OTEL_TRACES_SAMPLER as SamplerName, cfg.OTEL_TRACES_SAMPLER_ARG)
  const provider = new TracerProvider({
    idGenerator: ids,
    resource: resourceFromAttributes({ 'service.name': serviceName, 'service.namespace': 'watertight' }),
    sampler: chosen,
    spanProcessors: [new BatchSpanProcessor({
      exporter,
      maxQueueSize: cfg.OTEL_BSP_MAX_QUEUE_SIZE,
      scheduledDelayMillis: cfg.OTEL_BSP_SCHEDULE_DELAY,
      maxExportBatchSize: Math.min(cfg.OTEL_BSP_MAX_EXPORT_BATCH_SIZE, cfg.OTEL_BSP_MAX_QUEUE_SIZE),
      exportTimeoutMillis: cfg.OTEL_BSP_EXPORT_TIMEOUT,
    })],
  })
  propagation.setGlobalPropagator(new W3CTraceContextPropagator())
  trace.setGlobalTracerProvider(provider)
  const tracer = provider.getTracer('watertight')
  return {
    shutdown: () => provider.shutdown(),
    newTrace: () => newTrace(decide),
    startRoot: (traceId, name, o) => {
      ids.chosen = traceId
      try {
        return tracer.startSpan(name, o, ROOT_CONTEXT)
      } finally {
        ids.chosen = undefined
      }
    },
  }
}
