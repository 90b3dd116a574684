// Health, status and metrics routes of a lane. They bypass admission and
// under-pressure shedding: a load balancer must see the truth under load.
import type { FastifyInstance } from 'fastify'
import { poolCounts } from '../db/pool.ts'
import type { LaneKit } from './build-lane-app.ts'
import type { DbHealth } from './pressure.ts'
import { roundShare } from './fair.ts'

const ops = { config: { pressureHandler: () => undefined } }

export async function laneStatus (kit: LaneKit) {
  return {
    lane: kit.limits.lane,
    priority: kit.limits.priority,
    state: kit.state.state,
    permits: kit.limits.permits,
    active: kit.bulkhead.active,
    queue: { depth: kit.bulkhead.queued, capacity: kit.limits.queue, waitBudgetMs: kit.limits.queueWaitMs },
    // Fair admission: the tenants in flight, and the 5 holding the most (with their share) for the deck.
    fair: {
      by: kit.limits.fair.by,
      reserve: kit.bulkhead.reserve,
      tenants: kit.bulkhead.tenantsInFlight,
      shed: kit.bulkhead.fairShed,
      displaced: kit.bulkhead.displaced,
      top: kit.bulkhead.top(5).map(x => ({ ...x, share: roundShare(x.share) })),
    },
    deadlineMs: kit.limits.deadlineMs,
    pool: poolCounts(kit.pool),
    recovery: {
      lagMs: Math.round(kit.recovery.lagMs()),
      lags: kit.recovery.lags,
      baselineActive: kit.limits.recovery.baselineActive,
      lagLimitMs: kit.limits.recovery.lagMs,
    },
    breakers: kit.breakers.map(b => b.status()),
    db: {
      role: kit.limits.db.role,
      roleConnectionLimit: kit.limits.db.roleConnectionLimit,
      replicas: kit.share.live,
      share: kit.share.share,
    },
    rejections: kit.metrics.rejections(),
    latency: await kit.metrics.latencyWindow(),
    pid: process.pid,
    rssBytes: process.memoryUsage.rss(),
  }
}

export function registerOpsRoutes (app: FastifyInstance, kit: LaneKit, db: DbHealth): void {
  app.get('/health/live', ops, async () => ({ status: 'ok', pid: process.pid, rssBytes: process.memoryUsage.rss() }))
  // Ready fails when the DB is unreachable, the process is under pressure or it
  // is still warming up; saturation is reported, not failed (a saturated lane
  // still answers fast).
  app.get('/health/ready', ops, async (_req, reply) => {
    const pressure = app.isUnderPressure()
    const dbOk = db.ok()
    const warming = !kit.warmUp.done
    const ready = dbOk && !pressure && !warming
    if (!ready) reply.code(503).header('retry-after', '5')
    return { status: ready ? 'ready' : 'unready', lane: kit.limits.lane, state: kit.state.state, db: dbOk ? 'ok' : (db.lastError() ?? 'unreachable'), underPressure: pressure, warming }
  })
  app.get('/status', ops, async () => laneStatus(kit))
  app.get('/metrics', ops, async (_req, reply) => {
    reply.type(kit.registry.contentType)
    return kit.registry.metrics()
  })
}
