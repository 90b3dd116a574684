// The lane kit, a Fastify plugin: admission bulkhead, lane state, deadline,
// pool, under-pressure, health, status and metrics, all derived from the
// lane's frozen `limits`, decorated on the app as `app.kit`. `buildLaneApp` is
// the composition every lane uses: the HTTP app, this plugin, the lane's routes.
import type { FastifyInstance, FastifyPluginAsync, FastifyServerOptions } from 'fastify'
import fp from 'fastify-plugin'
import type pg from 'pg'
import type client from 'prom-client'
import { Bulkhead } from '../bulkhead.ts'
import { LaneState, type LaneStateName } from '../lane-state.ts'
import type { LaneLimits } from '../lanes.ts'
import { createLanePool, ReplaceablePool } from '../db/pool.ts'
import { countPoolLeaks, createRegistry, laneMetrics, type LaneMetrics } from '../metrics.ts'
import { createHttpApp } from '../http-app.ts'
import { admitted, type LaneHandler, type RejectHandler } from './admission.ts'
import { tenantOf } from './fair.ts'
import { registerPressure } from './pressure.ts'
import { registerOpsRoutes } from './ops-routes.ts'
import { RecoveryWatch } from './recovery.ts'
import { isWarmUpRequest, WarmUp } from './warm-up.ts'
import { ReplicaShare } from './replica-share.ts'
import { breakerMetrics, breakersState, type DependencyBreaker } from '../breaker.ts'
import { registerHttpTracing } from '../tracing.ts'

export interface LaneKit {
  readonly limits: LaneLimits
  /** The lane's pool right now (a lagging recovery replaces it: read it per use, never keep it). */
  readonly pool: pg.Pool
  /** Where the lane reports its dependencies' failures and successes (MC-RT-01's recovery check). */
  readonly recovery: RecoveryWatch
  readonly bulkhead: Bulkhead
  readonly state: LaneState
  readonly metrics: LaneMetrics
  readonly registry: client.Registry
  /** This replica's share of its role's CONNECTION LIMIT among the live replicas (replica-share.ts). */
  readonly share: ReplicaShare
  /** Whether the replica is warm yet; /health/ready fails until it is (warm-up.ts). */
  readonly warmUp: WarmUp
  /** The circuit breakers of the lane's outbound dependencies: in /status and the metrics. */
  readonly breakers: DependencyBreaker[]
  /** Wrap a route handler in the lane's admission bulkhead and deadline. */
  admitted (handler: LaneHandler, onReject: RejectHandler): ReturnType<typeof admitted>
}

export interface BuildLaneOptions {
  limits: LaneLimits
  databaseUrl: string
  logger?: FastifyServerOptions['logger']
  /** The lane's own routes. */
  routes: (app: FastifyInstance, kit: LaneKit) => void | Promise<void>
  /** How often the DB health check runs (ms). */
  healthCheckIntervalMs?: number
}

export type LaneAppConfig = Omit<BuildLaneOptions, 'routes' | 'healthCheckIntervalMs'>

export interface LaneKitOptions {
  limits: LaneLimits
  databaseUrl: string
  /** How often the DB health check runs (ms). */
  healthCheckIntervalMs?: number
}

const laneKitPlugin: FastifyPluginAsync<LaneKitOptions> = async (app, opts) => {
  const { limits } = opts
  const registry = createRegistry(limits.lane)
  const leaks = countPoolLeaks(registry)
  // The pool's max is this replica's share of the role's limit (replica-share.ts), a new pool's too.
  const share = new ReplicaShare({ limits, pool: () => pools.current, log: app.log })
  const makePool = () => leaks(createLanePool(limits, opts.databaseUrl, app.log, share.poolMax))
  const pools: ReplaceablePool = new ReplaceablePool(makePool, (step, err) => {
    app.log.warn({ lane: limits.lane, step, err }, `pool reset: ${step} failed; the reset goes on without it`)
    metrics.poolResetError(step)
  })
  const pool = (): pg.Pool => pools.current
  const state = new LaneState({
    permits: limits.permits,
    queueCapacity: limits.queue,
    ...limits.state,
    onTransition: (from: LaneStateName, to: LaneStateName) => app.log.warn({ lane: limits.lane, from, to }, 'lane state changed'),
  })
  const { weights } = limits.fair
  const bulkhead = new Bulkhead({
    permits: limits.permits,
    queue: limits.queue,
    queueWaitMs: limits.queueWaitMs,
    onChange: (a, q) => state.observe(a, q),
    reserve: limits.fair.reserve,
    weight: weights.size === 0 ? undefined : m => weights.get(m) ?? 1,
  })
  const recovery = new RecoveryWatch({
    ...limits.recovery,
    active: () => bulkhead.active,
    onLag: lagMs => {
      app.log.error({ alert: 'ALERT_BULKHEAD_RECOVERY_LAG', lane: limits.lane, lagMs: Math.round(lagMs), active: bulkhead.active, baseline: limits.recovery.baselineActive, poolReset: true },
        `ALERT_BULKHEAD_RECOVERY_LAG: ${limits.lane} still holds ${bulkhead.active} permits ${Math.round(lagMs)} ms after its dependency came back; resetting its connection pool`)
      metrics.poolReset()
      void pools.replace(limits.deadlineMs).then(ended => app.log.warn({ lane: limits.lane, backendsEnded: ended }, 'pool reset: the old pool\'s idle and stuck backends were ended'))
    },
  })
  const stateTimer = setInterval(() => { state.tick(); recovery.tick() }, 250)
  stateTimer.unref()
  const metrics = laneMetrics(registry, {
    lane: limits.lane,
    permits: limits.permits,
    queueCapacity: limits.queue,
    active: () => bulkhead.active,
    queued: () => bulkhead.queued,
    state: () => state.state,
    pool,
    tenants: () => bulkhead.tenantsInFlight,
    fairShed: () => bulkhead.fairShed,
    displaced: () => bulkhead.displaced,
    recoveryLagMs: () => recovery.lagMs(),
  })
  const kit: LaneKit = {
    limits,
    bulkhead,
    state,
    metrics,
    registry,
    recovery,
    share,
    warmUp: new WarmUp(),
    breakers: [],
    get pool () { return pool() },
    admitted: (handler, onReject) => admitted({
      lane: limits.lane,
      bulkhead,
      metrics,
      pool,
      recovery,
      deadlineMs: limits.deadlineMs,
      tenant: req => tenantOf(limits.fair.by, req),
    }, handler, onReject),
  }

  breakerMetrics(registry, () => kit.breakers)
  share.breakerState = () => breakersState(kit.breakers)

  app.addHook('onResponse', (req, reply, done) => {
    // The warm-up's own request is not traffic (warm-up.ts).
    if (isWarmUpRequest(req)) { done(); return }
    const route = req.routeOptions.url ?? 'unmatched'
    const labels = { lane: limits.lane, route, status_code: String(reply.statusCode) }
    metrics.requestDuration.observe(labels, reply.elapsedTime / 1000)
    if (route.startsWith('/v1/')) metrics.observeLatency(reply.elapsedTime / 1000)
    done()
  })
  app.addHook('onClose', async () => {
    clearInterval(stateTimer)
    for (const b of kit.breakers) b.stop()
    // By now nothing is in flight: the row goes first, so the other replicas
    // take this one's share at their next heartbeat rather than after its TTL.
    await share.stop()
    await pools.end()
  })

  app.decorate('kit', kit)
  const dbHealth = await registerPressure(app, kit, opts.healthCheckIntervalMs ?? 2_000)
  registerOpsRoutes(app, kit, dbHealth)
}

/** The lane kit as a plugin: not encapsulated, so `app.kit`, its hooks and its shedding cover the lane's routes. */
export const laneKit = fp(laneKitPlugin, { name: 'watertight-lane-kit', fastify: '5.x' })

declare module 'fastify' {
  interface FastifyInstance {
    /** The lane kit of this lane app (shared/lane-kit/build-lane-app.ts). */
    kit: LaneKit
  }
}

/** A lane's app: the HTTP app, the lane kit, the lane's routes. */
export async function buildLaneApp (opts: BuildLaneOptions): Promise<{ app: FastifyInstance, kit: LaneKit }> {
  const app = createHttpApp({ logger: opts.logger })
  registerHttpTracing(app)
  await app.register(laneKit, {
    limits: opts.limits, databaseUrl: opts.databaseUrl, healthCheckIntervalMs: opts.healthCheckIntervalMs,
  })
  await opts.routes(app, app.kit)
  return { app, kit: app.kit }
}
