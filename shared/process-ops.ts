// Health and metrics routes of a process that is not a lane (gateway, worker,
// deck, sandbox; lanes have theirs in lane-kit/ops-routes.ts): live, ready and
// its own registry's /metrics. They are exempt from under-pressure shedding: a
// probe and a scraper need the truth most when the process is behind.
import type { FastifyInstance } from 'fastify'
import type client from 'prom-client'
import { PRESSURE_EXEMPT } from './health-check.ts'

export interface ProcessOpsOptions {
  registry: client.Registry
  /**
   * The process registered shared/health-check.ts: ready then reports its DB
   * check (which never queues behind a busy pool) and fails under pressure, as
   * a lane's does. Read per request, so it may be registered in any order.
   */
  healthCheck?: boolean
  /** A reason of the process's own not to be ready yet (the gateway's unreadable key file), or undefined. */
  notReady?: () => string | undefined
  routeOptions?: { schema?: { hide?: boolean }, config?: Record<string, unknown> }
}

export function registerProcessOps (app: FastifyInstance, o: ProcessOpsOptions): void {
  const opts = { ...o.routeOptions, config: { ...PRESSURE_EXEMPT, ...o.routeOptions?.config } }
  app.get('/health/live', opts, async () => ({ status: 'ok', pid: process.pid, rssBytes: process.memoryUsage.rss() }))
  app.get('/health/ready', opts, async (_req, reply) => {
    const own = o.notReady?.()
    if (own !== undefined) { reply.code(503).header('retry-after', '5'); return { status: 'unready', reason: own } }
    if (!o.healthCheck) return { status: 'ready' }
    const underPressure = app.isUnderPressure()
    const db = app.dbHealth
    const dbOk = db?.ok() ?? true
    const ready = dbOk && !underPressure
    if (!ready) reply.code(503).header('retry-after', '5')
    return { status: ready ? 'ready' : 'unready', db: db ? (dbOk ? 'ok' : (db.lastError() ?? 'unreachable')) : 'none', underPressure, pressure: app.memoryUsage() }
  })
  app.get('/metrics', opts, async (_req, reply) => { reply.type(o.registry.contentType); return o.registry.metrics() })
}
