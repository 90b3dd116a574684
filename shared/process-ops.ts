// Health and metrics routes of a process that is not a lane (gateway, worker,
// deck, sandbox; lanes have theirs in lane-kit/ops-routes.ts): live, ready (its
// database answers, when it has one) and its own registry's /metrics.
import type { FastifyInstance } from 'fastify'
import type pg from 'pg'
import type client from 'prom-client'

export function registerProcessOps (app: FastifyInstance, o: { registry: client.Registry, pool?: pg.Pool, routeOptions?: { schema?: { hide?: boolean }, config?: Record<string, unknown> } }): void {
  const opts = o.routeOptions ?? {}
  app.get('/health/live', opts, async () => ({ status: 'ok', pid: process.pid, rssBytes: process.memoryUsage.rss() }))
  app.get('/health/ready', opts, async (_req, reply) => {
    if (!o.pool) return { status: 'ready' }
    try {
      await o.pool.query('select 1')
      return { status: 'ready' }
    } catch (err) {
      reply.code(503).header('retry-after', '5')
      return { status: 'unready', db: (err as Error).message }
    }
  })
  app.get('/metrics', opts, async (_req, reply) => { reply.type(o.registry.contentType); return o.registry.metrics() })
}
