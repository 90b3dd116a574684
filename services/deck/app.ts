// The deck's composition root: health check, default deny, page, its own
// health and metrics, and the admin API. It never listens (main.ts does), so
// tests can listen on port 0.
import type { FastifyServerOptions } from 'fastify'
import type pg from 'pg'
import client from 'prom-client'
import healthCheck from '../../shared/health-check.ts'
import { createHttpApp } from '../../shared/http-app.ts'
import { createHttpAgent } from '../../shared/lane-kit/http.ts'
import { countPoolLeaks, createRegistry } from '../../shared/metrics.ts'
import { DEFAULT_PRESSURE_LIMITS, type PressureLimits } from '../../shared/pressure-config.ts'
import { registerProcessOps } from '../../shared/process-ops.ts'
import { OPEN, adminGuard, denyByDefault } from './admin-auth.ts'
import { adminRoutes } from './admin-routes.ts'
import type { Collector } from './collector.ts'
import { registerPage } from './page.ts'

export interface DeckOptions {
  adminToken: string
  pool: pg.Pool
  collector: Collector
  sandboxUrl?: string | undefined
  pressure?: PressureLimits
  logger?: FastifyServerOptions['logger']
}

function deckRegistry (collector: Collector, pool: pg.Pool): client.Registry {
  const registry = createRegistry('deck')
  countPoolLeaks(registry)(pool)
  new client.Gauge({
    name: 'deck_target_up',
    help: 'Whether the deck reached the process at its last poll',
    labelNames: ['target', 'kind'],
    registers: [registry],
    collect () { for (const s of collector.snapshot()) this.set({ target: s.name, kind: s.kind }, s.up ? 1 : 0) },
  })
  return registry
}

export function buildDeckApp (o: DeckOptions) {
  const app = createHttpApp({ logger: o.logger })
  const requireAdmin = adminGuard(o.adminToken)
  const http = createHttpAgent({ connections: 2, timeoutMs: 2_000 })
  app.addHook('onClose', async () => { await http.close() })
  // The token first: a caller without it gets 401 whatever the deck's state, also
  // while it sheds under pressure (its onRequest hook runs before under-pressure's),
  // and learns nothing of that state.
  app.register(denyByDefault, { requireAdmin })
  // Its database is checked and reported (/health/ready) but does not shed the
  // deck: /admin/lanes and the page need no database, and an operator must still
  // see the fleet while PostgreSQL is down.
  app.register(healthCheck, { name: 'deck', limits: o.pressure ?? DEFAULT_PRESSURE_LIMITS, db: { pool: o.pool, shed: false } })
  registerPage(app)
  // Open without the token, besides the page: /health/live and /health/ready for
  // the kubelet's probes (deploy/k8s/deck.yaml: plain httpGet, no header) and
  // /metrics for Prometheus (deploy/prometheus/prometheus.yml and the pod's
  // prometheus.io annotations: scraped with no credentials). They carry no fleet
  // data beyond up/down per target and change nothing; NetworkPolicy and the
  // ClusterIP Service keep the port itself private.
  registerProcessOps(app, {
    registry: deckRegistry(o.collector, o.pool), healthCheck: true, routeOptions: { config: OPEN },
  })
  app.register(adminRoutes, { prefix: '/admin', collector: o.collector, pool: o.pool, requireAdmin, sandboxUrl: o.sandboxUrl, http })
  return app
}
