// Prometheus metrics (prom-client). Each process owns one Registry, passed in
// explicitly: no global registry, so nothing is shared between apps in a test
// process and each process serves only its own series.
import type { EventEmitter } from 'node:events'
import client from 'prom-client'
import type pg from 'pg'
import { LANE_STATES, type LaneStateName } from './lane-state.ts'
import type { RejectReason } from './bulkhead.ts'
import { poolCounts } from './db/pool.ts'
import { idleTrimStats } from './idle-trim.ts'
import { LatencyWindow as SlidingLatency } from './latency-window.ts'

export function createRegistry (processName: string): client.Registry {
  const registry = new client.Registry()
  registry.setDefaultLabels({ process: processName })
  client.collectDefaultMetrics({ register: registry })
  idleTrimMetrics(registry)
  return registry
}

/** A counter read at scrape time from a running count kept elsewhere (which only grows). */
function countOf (
  registry: client.Registry, name: string, help: string, labels: Record<string, string>, read: () => number
): void {
  let reported = 0
  new client.Counter({
    name,
    help,
    labelNames: Object.keys(labels),
    registers: [registry],
    collect () {
      const now = read()
      this.inc(labels, Math.max(0, now - reported))
      reported = Math.max(reported, now)
    },
  })
}

/** What shared/idle-trim.ts did in this process: its collections, their pauses, and the heap they freed. */
function idleTrimMetrics (registry: client.Registry): void {
  const counter = (name: string, help: string, read: () => number): void => countOf(registry, name, help, {}, read)
  counter('idle_trim_collections_total', 'Full collections run by the idle check (IDLE_TRIM_SECONDS)', () => idleTrimStats.collections)
  counter('idle_trim_pause_seconds_total', 'Time those collections paused the event loop', () => idleTrimStats.pauseSeconds)
  counter('idle_trim_freed_bytes_total', 'Heap those collections freed', () => idleTrimStats.freedBytes)
}

export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.12, 0.25, 0.5, 1, 2.5, 5, 10]

export type LaneRejectReason = RejectReason | 'under_pressure' | 'deadline'

export interface LaneMetricSources {
  lane: string
  permits: number
  queueCapacity: number
  active: () => number
  queued: () => number
  state: () => LaneStateName
  pool: () => pg.Pool
  /** How long the lane has lagged behind its recovered dependency (ms; 0 when it has not). */
  recoveryLagMs: () => number
  /**
   * Fair admission (shared/bulkhead.ts): tenants in flight, refusals of a tenant
   * at or over its share, waiters displaced.
   */
  tenants: () => number
  fairShed: () => number
  displaced: () => number
}

export interface LaneMetrics {
  rejection (reason: LaneRejectReason): void
  /** A recovery lag reset the pool. */
  poolReset (): void
  /** A step of that reset failed (shared/db/pool.ts ResetStep). */
  poolResetError (step: string): void
  permitWait (seconds: number): void
  requestDuration: client.Histogram<'lane' | 'route' | 'status_code'>
  /** A data-plane request's duration (seconds), for the sliding one-minute window. */
  observeLatency (seconds: number): void
  /** p50/p99 of data-plane requests over the last minute (null when none). */
  latencyWindow (): Promise<LatencyWindow>
  rejections (): Record<string, number>
}

export interface LatencyWindow { windowSeconds: number, p50Ms: number | null, p99Ms: number | null }

/** The sliding window behind LatencyWindow: what an operator means by "p99 right now". */
export const LATENCY_WINDOW_SECONDS = 60

export function laneMetrics (registry: client.Registry, s: LaneMetricSources): LaneMetrics {
  const lane = s.lane
  new client.Gauge({ name: 'bulkhead_threads_active', help: 'Executions holding a permit', labelNames: ['lane'], registers: [registry], collect () { this.set({ lane }, s.active()) } })
  new client.Gauge({ name: 'bulkhead_threads_max', help: 'Permits of the lane', labelNames: ['lane'], registers: [registry], collect () { this.set({ lane }, s.permits) } })
  new client.Gauge({ name: 'bulkhead_queue_depth', help: 'Requests waiting for a permit', labelNames: ['lane'], registers: [registry], collect () { this.set({ lane }, s.queued()) } })
  new client.Gauge({ name: 'bulkhead_queue_capacity', help: 'Bounded queue capacity', labelNames: ['lane'], registers: [registry], collect () { this.set({ lane }, s.queueCapacity) } })
  new client.Gauge({
    name: 'bulkhead_state',
    help: 'Lane state, 1 for the current state',
    labelNames: ['lane', 'state'],
    registers: [registry],
    collect () {
      const cur = s.state()
      for (const st of LANE_STATES) this.set({ lane, state: st }, st === cur ? 1 : 0)
    },
  })
  new client.Gauge({
    name: 'bulkhead_db_pool_connections',
    help: 'The lane pool: total, idle, waiting clients',
    labelNames: ['lane', 'state'],
    registers: [registry],
    collect () { const c = poolCounts(s.pool()); this.set({ lane, state: 'total' }, c.total); this.set({ lane, state: 'idle' }, c.idle); this.set({ lane, state: 'waiting' }, c.waiting) },
  })
  new client.Gauge({
    name: 'bulkhead_recovery_lag_seconds',
    help: 'Seconds since the lane\'s dependency came back while active permits are still at or over the recovery baseline (0 when not lagging); ALERT_BULKHEAD_RECOVERY_LAG past 10',
    labelNames: ['lane'],
    registers: [registry],
    collect () { this.set({ lane }, s.recoveryLagMs() / 1000) },
  })
  // Counts, not a label per merchant: the set of tenants is unbounded. The deck
  // and /status name the top ones.
  new client.Gauge({ name: 'bulkhead_tenants_in_flight', help: 'Tenants (merchants or API clients) holding a permit or waiting for one', labelNames: ['lane'], registers: [registry], collect () { this.set({ lane }, s.tenants()) } })
  countOf(registry, 'bulkhead_fair_shed_total', 'Requests refused while their tenant held at least its fair share and another tenant was in flight (displaced waiters included)', { lane }, s.fairShed)
  countOf(registry, 'bulkhead_fair_displaced_total', 'Queued requests that gave their place to an arrival of a tenant holding less', { lane }, s.displaced)
  const resets = new client.Counter({ name: 'bulkhead_pool_resets_total', help: 'Connection pool resets after a recovery lag (MC-RT-01, ALERT_BULKHEAD_RECOVERY_LAG)', labelNames: ['lane'], registers: [registry] })
  resets.inc({ lane }, 0)
  const resetErrors = new client.Counter({ name: 'bulkhead_pool_reset_errors_total', help: 'Steps of a pool reset that failed (connect, terminate, terminate_returned, end); the reset goes on without them', labelNames: ['lane', 'step'], registers: [registry] })
  const rejection = new client.Counter({ name: 'bulkhead_rejection_total', help: 'Requests rejected by the lane, by reason', labelNames: ['lane', 'reason'], registers: [registry] })
  const wait = new client.Histogram({ name: 'bulkhead_permit_wait_seconds', help: 'Time admitted requests waited for a permit', labelNames: ['lane'], buckets: [0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5], registers: [registry] })
  const requestDuration = new client.Histogram({ name: 'http_request_duration_seconds', help: 'HTTP request duration', labelNames: ['lane', 'route', 'status_code'], buckets: LATENCY_BUCKETS, registers: [registry] })
  // The last minute (shared/latency-window.ts), not the process lifetime the
  // histogram's counters add up to: what the deck shows as "p99 right now".
  const window = new SlidingLatency()
  new client.Gauge({
    name: 'bulkhead_request_latency_seconds',
    help: 'Data-plane request duration over the last minute: its 50th and 99th percentile',
    labelNames: ['lane', 'percentile'],
    registers: [registry],
    collect () { const [p50, p99] = window.quantiles([0.5, 0.99]); this.set({ lane, percentile: '50' }, p50 ?? NaN); this.set({ lane, percentile: '99' }, p99 ?? NaN) },
  })
  const counts: Record<string, number> = {}
  return {
    observeLatency (seconds) { window.observe(seconds) },
    async latencyWindow () {
      const ms = (v: number | null): number | null => v === null ? null : Math.round(v * 1e6) / 1e3
      const [p50, p99] = window.quantiles([0.5, 0.99])
      return { windowSeconds: LATENCY_WINDOW_SECONDS, p50Ms: ms(p50!), p99Ms: ms(p99!) }
    },
    poolReset () { resets.inc({ lane }) },
    poolResetError (step) { resetErrors.inc({ lane, step }) },
    rejection (reason) { rejection.inc({ lane, reason }); counts[reason] = (counts[reason] ?? 0) + 1 },
    permitWait (seconds) { wait.observe({ lane }, seconds) },
    requestDuration,
    rejections: () => ({ ...counts }),
  }
}

/**
 * db_pool_connection_leaks_total{pool}: clients held past the leak threshold
 * (DEC-BH-01), counted from the pools' 'leak' events. Returns a function that
 * attaches a pool (and returns it), for every pool the process makes.
 */
export function countPoolLeaks (registry: client.Registry): <P extends pg.Pool>(pool: P) => P {
  const leaks = new client.Counter({ name: 'db_pool_connection_leaks_total', help: 'Pool clients held longer than the leak detection threshold (DEC-BH-01)', labelNames: ['pool'], registers: [registry] })
  return pool => {
    ;(pool as unknown as EventEmitter).on('leak', (r: { pool: string }) => leaks.inc({ pool: r.pool }))
    return pool
  }
}
