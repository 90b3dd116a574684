// The OpenTelemetry SDK of a process that traces, imported by tracing.ts only
// when an endpoint is configured (a chunk of its own in the bundle: a process
// that does not trace never loads it). Spans are batched in a bounded queue
// and exported over OTLP/HTTP; W3C trace context is the propagation format. No
// context manager: the fleet passes trace contexts explicitly (tracing.ts).
import { diag, DiagLogLevel, propagation, trace } from '@opentelemetry/api'
import { setGlobalErrorHandler, W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, RandomIdGenerator, SamplingDecision,
  TraceIdRatioBasedSampler, TracerProvider, type IdGenerator, type Sampler,
} from '@opentelemetry/sdk-trace'
import { ROOT_CONTEXT, SpanKind, type Span, type SpanOptions } from '@opentelemetry/api'
import type { SamplerName, TracingConfig } from './tracing.ts'

export function sampler (name: SamplerName, ratio: number): Sampler {
  const root = name.endsWith('always_on')
    ? new AlwaysOnSampler()
    : name.endsWith('always_off') ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(ratio)
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root
}

/**
 * The SDK's random ids, except that a new trace's id can be chosen before its
 * first span: tracing.ts asks the sampler about a new trace before making any
 * span (a trace left out gets none), and a trace it keeps must keep the id the
 * sampler decided on.
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
  traceId (): string
  spanId (): string
  /** Whether the sampler keeps a new trace with this id (a root request span's decision). */
  samples (traceId: string, name: string): boolean
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
    traceId: () => ids.generateTraceId(),
    spanId: ids.generateSpanId,
    samples: (traceId, name) => {
      const { decision } = chosen.shouldSample(ROOT_CONTEXT, traceId, name, SpanKind.SERVER, {}, [])
      return decision !== SamplingDecision.NOT_RECORD
    },
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
