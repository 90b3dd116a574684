// The gateway: authenticate, guard against retry storms, refuse raw card
// numbers, validate at the edge, then proxy to the lane that owns the route.
// It holds no database connection and no lane state; the lane, not the gateway,
// decides admission.
import type { FastifyInstance, FastifyServerOptions } from 'fastify'
import swagger from '@fastify/swagger'
import underPressure from '@fastify/under-pressure'
import client from 'prom-client'
import { createHttpApp } from '../shared/http-app.ts'
import { distrustCallerTraceContext, registerHttpTracing } from '../shared/tracing.ts'
import { problemReply } from '../shared/problem.ts'
import { AppError } from '../shared/errors.ts'
import { LATENCY_BUCKETS, createRegistry } from '../shared/metrics.ts'
import { registerProcessOps } from '../shared/process-ops.ts'
import type { LaneLimits, LaneName } from '../shared/lanes.ts'
import { rateLimitFields } from '../shared/rate-limit-fields.ts'
import { BALANCING_DEFAULTS, createUpstreams, closeUpstreams, startUpstreams, type BalancingOptions } from './upstreams.ts'
import { registerReplicaMetrics, replicaViews } from './replica-metrics.ts'
import { laneRoutes, type ProxyCounters } from './proxy.ts'
import type { KeySource } from './auth.ts'
import { replicaShare, RETRY_GUARD_DEFAULTS, retryGuard, type RetryGuardConfig, type RetryGuardOptions } from './retry-guard.ts'
import { RedisGuardStore } from './guard-store.ts'
import { claimRehearsals, isRehearsal, type GatewayWarmUp } from './warm-up.ts'

export interface GatewayConfig {
  limits: Record<LaneName, LaneLimits>
  laneUrls: Record<LaneName, string>
  keys: KeySource
  retry?: RetryGuardConfig
  /** Shed at the edge when the gateway's own event loop lags this much (ms). */
  maxEventLoopDelayMs?: number
  /** …or its heap or resident memory passes these (bytes; 0 = not checked). */
  maxHeapUsedBytes?: number
  maxRssBytes?: number
  logger?: FastifyServerOptions['logger']
  /** How lane replicas are found, checked, ejected and ramped (upstreams.ts). */
  balancing?: Omit<BalancingOptions, 'onChange'>
  /** The gateway's warm-up (warm-up.ts): unready until it is done; none, ready at once. */
  warmUp?: GatewayWarmUp
  /** The retry guard's counters in Redis (guard-store.ts); none: in this process only. */
  sharedStore?: { url: string, budgetMs: number, replicas: number }
  /** Shed answers keep the lane's Server-Timing and get the gateway's (proxy.ts); off: stripped. */
  serverTiming?: boolean
  /** A caller's traceparent: continued (default), or a new trace linked to it. */
  traceparent?: 'continue' | 'restart'
}

export async function buildApp (cfg: GatewayConfig) {
  const app = createHttpApp({ logger: cfg.logger })
  if (cfg.traceparent === 'restart') distrustCallerTraceContext(app)
  registerHttpTracing(app)
  const registry = createRegistry('gateway')
  const ejected = new client.Counter({ name: 'gateway_upstream_ejections_total', help: 'Lane replicas taken out of rotation after a transport error', labelNames: ['lane'], registers: [registry] })
  for (const lane of Object.keys(cfg.limits)) ejected.inc({ lane }, 0)
  const upstreams = createUpstreams(cfg.limits, cfg.laneUrls, {
    ...(cfg.balancing ?? BALANCING_DEFAULTS),
    onChange: (lane, r, what) => {
      if (what === 'ejected') ejected.inc({ lane })
      app.log.info({ lane, replica: r.address, change: what, inflight: r.inflight }, 'lane replica')
    },
  })
  new client.Gauge({ name: 'gateway_upstream_inflight', help: 'Requests in flight to each lane', labelNames: ['lane'], registers: [registry], collect () { for (const u of Object.values(upstreams)) this.set({ lane: u.lane }, u.inflight) } })
  registerReplicaMetrics(registry, upstreams)
  const duration = new client.Histogram({ name: 'http_request_duration_seconds', help: 'HTTP request duration at the gateway', labelNames: ['lane', 'route', 'status_code'], buckets: LATENCY_BUCKETS, registers: [registry] })
  const unavailable = new client.Counter({ name: 'gateway_lane_unavailable_total', help: 'Requests failed because a lane was down or unreachable (reason: the transport error, or cap_full while it was)', labelNames: ['lane', 'reason'], registers: [registry] })
  const blocked = new client.Counter({ name: 'gateway_retry_storm_blocked_total', help: 'Requests blocked at the gateway by the retry-storm guard, the retry budget or the client rate limit', labelNames: ['reason'], registers: [registry] })

  const shed = new client.Counter({ name: 'gateway_shed_total', help: 'Requests the gateway shed for its own sake', labelNames: ['reason'], registers: [registry] })

  await app.register(swagger, {
    openapi: {
      info: { title: 'watertight data plane', version: '1', description: 'Payment ingress: card authorization, fraud screening, tax quotes. Every error is application/problem+json with a stable code (docs/api.md, Error codes).' },
      components: { securitySchemes: { apiKey: { type: 'http', scheme: 'bearer' } } },
      security: [{ apiKey: [] }],
    },
  })
  // The gateway sheds for itself too: when its event loop lags, queueing more
  // requests only adds latency to every lane's traffic. The capacity it names is
  // what it normally carries at once: the sum of its per-lane in-flight caps.
  const overloaded = rateLimitFields({ name: 'gateway', quota: Object.values(upstreams).reduce((n, u) => n + u.cap, 0), windowSeconds: 1, resetSeconds: 1 })
  // The warm-up's requests are known before the gateway's shedding looks at them (warm-up.ts).
  const warmUp = cfg.warmUp
  if (warmUp && !warmUp.done) claimRehearsals(app, warmUp)
  await app.register(underPressure, {
    maxEventLoopDelay: cfg.maxEventLoopDelayMs ?? 500,
    maxHeapUsedBytes: cfg.maxHeapUsedBytes ?? 0,
    maxRssBytes: cfg.maxRssBytes ?? 0,
    retryAfter: 1,
    pressureHandler: (req, reply, type) => {
      if (isRehearsal(req)) return undefined
      shed.inc({ reason: 'under_pressure' })
      return problemReply(reply, new AppError('ERR_GATEWAY_OVERLOADED', { detail: `gateway under pressure (${type})`, headers: overloaded.headers, extensions: overloaded.extensions })) as unknown as void
    },
  })
  // A request can be in flight to a lane for its deadline, the gateway's extra second and a connect (upstreams.ts).
  const maxInFlightMs = Math.max(...Object.values(cfg.limits).map(l => l.deadlineMs)) + 2_000
  const retry = cfg.retry ?? RETRY_GUARD_DEFAULTS
  const shared = sharedGuardStore(app, registry, cfg, retry, maxInFlightMs)
  await shared?.store.connected(2_000)
  await app.register(retryGuard, { config: retry, onBlock: reason => blocked.inc({ reason }), maxInFlightMs, shared })
  // The fleet's one rejection counter, by lane and reason: what the gateway refuses
  // on a lane's behalf (retry storms, a lane down, its cap full) counts there too.
  const rejected = new client.Counter({ name: 'bulkhead_rejection_total', help: 'Requests rejected before reaching the lane, by reason', labelNames: ['lane', 'reason'], registers: [registry] })
  const counters: ProxyCounters = {
    unavailable: l => { unavailable.inc(l); rejected.inc({ lane: l.lane, reason: 'lane_unavailable' }) },
    saturated: lane => rejected.inc({ lane, reason: 'gateway_cap' }),
  }

  const ops = { schema: { hide: true }, config: { pressureHandler: () => undefined } }
  registerProcessOps(app, { registry, routeOptions: ops, notReady: () => cfg.keys.problem() ?? (cfg.warmUp?.done === false ? 'warming up' : undefined) })
  app.get('/openapi.json', ops, async () => app.swagger())
  // Each lane's replicas as balanced here (the deck's lane tiles show them), and
  // the gateway's RSS, as its /health/live reports it (the deck polls this instead).
  app.get('/status', ops, async () => ({ lanes: replicaViews(upstreams), pid: process.pid, rssBytes: process.memoryUsage.rss() }))

  app.addHook('onResponse', (req, reply, done) => {
    // The warm-up's own requests are not traffic.
    if (isRehearsal(req)) { done(); return }
    const spec = req.routeOptions.config as { lane?: string }
    duration.observe({ lane: spec.lane ?? 'none', route: req.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) }, reply.elapsedTime / 1000)
    done()
  })

  await app.register(laneRoutes, {
    upstreams,
    keys: cfg.warmUp?.keySource(cfg.keys) ?? cfg.keys,
    rejected,
    counters,
    serverTiming: cfg.serverTiming ?? false,
  })
  app.addHook('onClose', async () => { await closeUpstreams(upstreams) })
  // Names resolved and every replica checked once before the gateway serves.
  await startUpstreams(upstreams)
  return { app, registry, upstreams }
}

/**
 * The shared store of the retry guard's counters, with what an operator sees of
 * it: a gauge that says whether decisions are shared, a counter of those made
 * here alone, and one log line each time it goes and comes back.
 */
function sharedGuardStore (app: FastifyInstance, registry: client.Registry, cfg: GatewayConfig, retry: RetryGuardConfig, holdMs: number): RetryGuardOptions['shared'] {
  const s = cfg.sharedStore
  if (s === undefined) return undefined
  const share = replicaShare(retry, s.replicas).perKeyAttempts
  const store = new RedisGuardStore({
    url: s.url,
    budgetMs: s.budgetMs,
    onChange: (isUp, reason) => {
      if (isUp) app.log.info('retry guard store back: limits shared by every gateway replica again')
      else app.log.warn({ reason, replicas: s.replicas }, `retry guard store unavailable: this replica enforces its share of each limit alone (1/${s.replicas}: ${share} attempts per key per window)`)
    },
  }, { ...retry, holdMs })
  new client.Gauge({ name: 'gateway_retry_guard_store_up', help: 'Whether the retry guard\'s shared store (REDIS_URL) is deciding: 1, or 0 while this replica decides alone', registers: [registry], collect () { this.set(store.up ? 1 : 0) } })
  const local = new client.Counter({ name: 'gateway_retry_guard_local_decisions_total', help: 'Requests the retry guard decided in this replica alone because its shared store was unavailable', registers: [registry] })
  app.addHook('onClose', async () => { await store.close() })
  return { store, replicas: s.replicas, onLocal: () => local.inc() }
}
