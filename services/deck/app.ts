// The deck's composition root: page, admin API, and its own health and metrics.
// It never listens (main.ts does), so tests can listen on port 0.
import type { FastifyServerOptions } from 'fastify'
import type pg from 'pg'
import client from 'prom-client'
import { createHttpApp } from '../../shared/http-app.ts'
import { createHttpAgent } from '../../shared/lane-kit/http.ts'
import { createRegistry } from '../../shared/metrics.ts'
import { registerProcessOps } from '../../shared/process-ops.ts'
import { adminGuard } from './admin-auth.ts'
import { registerAdminRoutes } from './admin-routes.ts'
import type { Collector } from './collector.ts'
import { registerPage } from './page.ts'

export interface DeckOptions {
  adminToken: string
  pool: pg.Pool
  collector: Collector
  sandboxUrl?: string | undefined
  logger?: FastifyServerOptions['logger']
}

export function buildDeckApp (o: DeckOptions) {
  const app = createHttpApp({ logger: o.logger })
  const registry = createRegistry('deck')
  new client.Gauge({
    name: 'deck_target_up', help: 'Whether the deck reached the process at its last poll', labelNames: ['target', 'kind'], registers: [registry],
    collect () { for (const s of o.collector.snapshot()) this.set({ target: s.name, kind: s.kind }, s.up ? 1 : 0) },
  })
  registerPage(app)
  const http = createHttpAgent({ connections: 2, timeoutMs: 2_000 })
  app.addHook('onClose', async () => { await http.close() })
  registerAdminRoutes(app, { collector: o.collector, pool: o.pool, requireAdmin: adminGuard(o.adminToken), sandboxUrl: o.sandboxUrl, http })
  registerProcessOps(app, { registry, pool: o.pool })
  return app
}
