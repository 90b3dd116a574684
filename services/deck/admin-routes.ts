// The admin API behind The Deck, an encapsulated plugin (app.ts mounts it at
// /admin): its onRequest hook authenticates every route registered inside it,
// whatever URL reached the route. It does not lean on the deck's default deny
// (admin-auth.ts), nor that on it. Reads come from the collector (lanes) and
// from PostgreSQL through the deck's own role (queues); every change is logged
// with who made it and what it was before and after.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type pg from 'pg'
import { Type } from 'typebox'
import type { Agent } from 'undici'
import { QueueName, QueuePatchBody, RequeueBody, SandboxFaults } from '../../shared/admin-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import { listDead, queueStats, requeueDead, updateQueue, type QueueStats } from '../../shared/queue/admin.ts'
import type { RequireAdmin } from './admin-auth.ts'
import type { Collector } from './collector.ts'

export interface AdminDeps {
  collector: Collector
  pool: pg.Pool
  requireAdmin: RequireAdmin
  /** The tax sandbox, for local and demo runs only; fault injection is off without it. */
  sandboxUrl: string | undefined
  /** The deck's own HTTP client for the sandbox. */
  http: Agent
}

const NameParams = Type.Object({ name: QueueName }, { additionalProperties: false })
// Query strings are strings (the apps do not coerce types): a positive count, capped where used.
const Count = Type.String({ pattern: '^[1-9][0-9]{0,3}$' })
const SANDBOX_TIMEOUT_MS = 2_000

const view = (q: QueueStats) => ({ ...q, running: q.jobs.fetched + q.jobs.processing })

export async function adminRoutes (app: FastifyInstance, d: AdminDeps): Promise<void> {
  app.addHook('onRequest', async (req, reply) => {
    reply.header('cache-control', 'no-store')
    req.operator = d.requireAdmin(req)
  })
  const change = (req: FastifyRequest, what: Record<string, unknown>): void => {
    req.log.warn({ who: req.operator, what }, 'admin change')
  }
  const queueOr404 = async (name: string): Promise<QueueStats> => {
    const q = (await queueStats(d.pool)).find(s => s.name === name)
    if (!q) throw new AppError('ERR_QUEUE_NOT_FOUND', { detail: `no job queue named ${name}` })
    return q
  }

  app.get('/lanes', async () => {
    const all = d.collector.snapshot()
    const gateway = all.find(s => s.kind === 'gateway')
    return {
      pollMs: d.collector.pollMs,
      checkedAt: all.map(s => s.checkedAt).sort().at(-1),
      // Each lane with its replicas as the gateway balances them (none known: the gateway is down or not polled yet).
      lanes: all.filter(s => s.kind === 'lane').map(s => ({ ...s, replicas: gateway?.replicas?.[s.name] ?? [] })),
      processes: all.filter(s => s.kind !== 'lane').map(({ status: _s, rejectionsPerSecond: _r, lastSeen: _l, replicas: _p, ...p }) => p),
      deck: { pid: process.pid, rssBytes: process.memoryUsage.rss() },
    }
  })

  app.get('/timeline', { schema: { querystring: Type.Object({ seconds: Type.Optional(Count) }, { additionalProperties: false }) } }, async req => {
    const seconds = Math.min(3_600, Number((req.query as { seconds?: string }).seconds ?? 300))
    return { pollMs: d.collector.pollMs, points: d.collector.timeline(seconds) }
  })

  app.get('/queues', async () => ({ queues: (await queueStats(d.pool)).map(view) }))

  app.patch('/queues/:name', { schema: { params: NameParams, body: QueuePatchBody } }, async req => {
    const { name } = req.params as { name: string }
    const patch = req.body as QueuePatchBody
    const before = await queueOr404(name)
    if (!await updateQueue(d.pool, name, patch)) throw new AppError('ERR_QUEUE_NOT_FOUND', { detail: `no job queue named ${name}` })
    const after = await queueOr404(name)
    const pick = (q: QueueStats) =>
      ({ maxWorkers: q.maxWorkers, paused: q.paused, active: q.active, zombieTimeoutSeconds: q.zombieTimeoutSeconds })
    change(req, { action: 'queue.update', queue: name, patch, before: pick(before), after: pick(after) })
    return view(after)
  })

  app.get('/queues/:name/dead', { schema: { params: NameParams, querystring: Type.Object({ limit: Type.Optional(Count) }, { additionalProperties: false }) } }, async req => {
    const { name } = req.params as { name: string }
    await queueOr404(name)
    const limit = Math.min(1_000, Number((req.query as { limit?: string }).limit ?? 100))
    return { queue: name, jobs: await listDead(d.pool, name, limit) }
  })

  app.post('/queues/:name/dead/requeue', { schema: { params: NameParams, body: RequeueBody } }, async req => {
    const { name } = req.params as { name: string }
    const { ids } = req.body as RequeueBody
    await queueOr404(name)
    const requeued = await requeueDead(d.pool, name, ids)
    change(req, { action: 'queue.requeue-dead', queue: name, ids: ids ?? 'all', requeued })
    return { queue: name, requeued }
  })

  const sandbox = async (method: 'GET' | 'PUT', body?: unknown): Promise<unknown> => {
    if (!d.sandboxUrl) throw new AppError('ERR_FAULT_INJECTION_DISABLED')
    try {
      const res = await d.http.request({
        origin: d.sandboxUrl,
        path: '/faults',
        method,
        signal: AbortSignal.timeout(SANDBOX_TIMEOUT_MS),
        headers: { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
      const json = await res.body.json()
      if (res.statusCode !== 200) throw new Error(`sandbox answered ${res.statusCode}`)
      return json
    } catch (err) {
      throw new AppError('ERR_SANDBOX_UNAVAILABLE', { detail: `the tax sandbox did not take the change: ${(err as Error).message}`, cause: err })
    }
  }
  app.get('/faults/tax', async () => sandbox('GET'))
  app.put('/faults/tax', { schema: { body: SandboxFaults } }, async req => {
    const before = await sandbox('GET')
    const after = await sandbox('PUT', req.body)
    change(req, { action: 'faults.tax', before, after })
    return after
  })
}
