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
  AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider,
  type Sampler,
} from '@opentelemetry/sdk-trace'
import type { SamplerName, TracingConfig } from './tracing.ts'

export function sampler (name: SamplerName, ratio: number): Sampler {
  const root = name.endsWith('always_on')
    ? new AlwaysOnSampler()
    : name.endsWith('always_off') ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(ratio)
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root
}

export function install (cfg: TracingConfig, serviceName: string) {
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
  const tracesUrl = cfg.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
  // Without a traces URL the exporter reads OTEL_EXPORTER_OTLP_ENDPOINT and appends /v1/traces.
  const exporter = new OTLPTraceExporter(tracesUrl ? { url: tracesUrl } : {})
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName, 'service.namespace': 'watertight' }),
    sampler: sampler(cfg.OTEL_TRACES_SAMPLER as SamplerName, cfg.OTEL_TRACES_SAMPLER_ARG),
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
  return { shutdown: () => provider.shutdown() }
}
