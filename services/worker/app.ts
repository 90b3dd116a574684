// The worker's HTTP side: health, status and Prometheus metrics, behind the
// shared health check (under-pressure with its jobs_ds pool's reachability).
// Queue gauges are read from PostgreSQL at scrape time (one small query), so
// every worker reports the fleet-wide truth, not its own view.
import type { FastifyServerOptions } from 'fastify'
import client from 'prom-client'
import type pg from 'pg'
import healthCheck from '../../shared/health-check.ts'
import { createHttpApp } from '../../shared/http-app.ts'
import { countPoolLeaks, createRegistry } from '../../shared/metrics.ts'
import { breakerMetrics, type DependencyBreaker } from '../../shared/breaker.ts'
import type { PressureLimits } from '../../shared/pressure-config.ts'
import { registerProcessOps } from '../../shared/process-ops.ts'
import { queueStats } from '../../shared/queue/admin.ts'
import type { Worker } from './runner.ts'

export function buildApp (o: { worker: Worker, pool: pg.Pool, lanePools?: pg.Pool[], breakers?: readonly DependencyBreaker[], pressure: PressureLimits, logger?: FastifyServerOptions['logger'] }) {
  const app = createHttpApp({ logger: o.logger })
  app.register(healthCheck, { name: 'worker', limits: o.pressure, db: { pool: o.pool } })
  const registry = createRegistry('worker')
  const leaks = countPoolLeaks(registry)
  for (const p of [o.pool, ...(o.lanePools ?? [])]) leaks(p)
  const mine = new Set(Object.keys(o.worker.runningByQueue()))
  const stats = async () => (await queueStats(o.pool)).filter(s => mine.has(s.name))
  new client.Gauge({
    name: 'queue_jobs',
    help: 'Jobs by queue and status (dead = in jobs_dead)',
    labelNames: ['queue', 'status'],
    registers: [registry],
    async collect () {
      for (const s of await stats()) {
        for (const [st, n] of Object.entries(s.jobs)) this.set({ queue: s.name, status: st }, n)
      }
    },
  })
  new client.Gauge({
    name: 'queue_max_workers',
    help: 'MaxWorkers of the queue (-1 = unlimited)',
    labelNames: ['queue'],
    registers: [registry],
    async collect () { for (const s of await stats()) this.set({ queue: s.name }, s.maxWorkers ?? -1) },
  })
  new client.Gauge({
    name: 'queue_oldest_pending_age_seconds',
    help: 'Age of the oldest due pending job',
    labelNames: ['queue'],
    registers: [registry],
    async collect () { for (const s of await stats()) this.set({ queue: s.name }, s.oldestPendingAgeSeconds) },
  })
  new client.Gauge({
    name: 'queue_worker_running',
    help: 'Jobs this worker process is running',
    labelNames: ['queue'],
    registers: [registry],
    collect () { for (const [q, n] of Object.entries(o.worker.runningByQueue())) this.set({ queue: q }, n) },
  })
  new client.Gauge({
    name: 'queue_zombies_stranded',
    help: 'Processing jobs whose heartbeat stopped over twice the zombie timeout ago: no running worker serving their queue knows their type (fleet-wide, as of the last rescue cycle of this worker)',
    labelNames: ['queue', 'type'],
    registers: [registry],
    collect () { this.reset(); for (const s of o.worker.stranded) this.set({ queue: s.queue, type: s.type }, s.jobs) },
  })
  const rescued = new client.Counter({ name: 'queue_zombies_rescued_total', help: 'Zombie jobs rescued by this worker', labelNames: ['queue'], registers: [registry] })
  const duration = new client.Histogram({ name: 'queue_job_duration_seconds', help: 'Job run time by outcome', labelNames: ['queue', 'type', 'outcome'], buckets: [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120], registers: [registry] })
  o.worker.on('job', (e: { queue: string, type: string, outcome: string, seconds: number }) => duration.observe({ queue: e.queue, type: e.type, outcome: e.outcome }, e.seconds))
  o.worker.on('rescued', (r: { byQueue: Record<string, number> }) => { for (const [q, n] of Object.entries(r.byQueue)) rescued.inc({ queue: q }, n) })

  registerProcessOps(app, { registry, healthCheck: true })
  breakerMetrics(registry, () => o.breakers ?? [])
  app.addHook('onClose', async () => { for (const b of o.breakers ?? []) b.stop() })
  app.get('/status', async () => ({ workerId: o.worker.id, running: o.worker.runningByQueue(), ...o.worker.stats, breakers: (o.breakers ?? []).map(b => b.status()), pid: process.pid }))
  return app
}
