// The gateway: authenticate, classify, validate at the edge, proxy to the lane
// that owns the route. It holds no database connection and no lane state; the
// lane, not the gateway, decides admission.
import type { FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import client from 'prom-client'
import { createHttpApp } from '../shared/http-app.ts'
import { AppError } from '../shared/errors.ts'
import { LATENCY_BUCKETS, createRegistry } from '../shared/metrics.ts'
import type { LaneLimits, LaneName } from '../shared/lanes.ts'
import { ROUTES, type RouteSpec } from './classify.ts'
import { createUpstreams, closeUpstreams, type Upstream } from './upstreams.ts'
import { authenticate, type KeySource } from './auth.ts'
import { panFields } from '../shared/pan.ts'

export interface GatewayConfig {
  limits: Record<LaneName, LaneLimits>
  laneUrls: Record<LaneName, string>
  keys: KeySource
  logger?: FastifyServerOptions['logger']
}

// Hop-by-hop and internal headers never cross the gateway.
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'x-request-id'])

export async function buildApp (cfg: GatewayConfig) {
  const app = createHttpApp({ logger: cfg.logger })
  const registry = createRegistry('gateway')
  const upstreams = createUpstreams(cfg.limits, cfg.laneUrls)
  new client.Gauge({ name: 'gateway_upstream_inflight', help: 'Requests in flight to each lane', labelNames: ['lane'], registers: [registry], collect () { for (const u of Object.values(upstreams)) this.set({ lane: u.lane }, u.inflight) } })
  const duration = new client.Histogram({ name: 'http_request_duration_seconds', help: 'HTTP request duration at the gateway', labelNames: ['lane', 'route', 'status_code'], buckets: LATENCY_BUCKETS, registers: [registry] })
  const unavailable = new client.Counter({ name: 'gateway_lane_unavailable_total', help: 'Requests failed fast because a lane was down or its cap was full', labelNames: ['lane', 'reason'], registers: [registry] })
  new client.Counter({ name: 'gateway_retry_storm_blocked_total', help: 'Requests blocked by the retry-storm guard', labelNames: ['reason'], registers: [registry] })

  app.get('/health/live', async () => ({ status: 'ok' }))
  app.get('/health/ready', async () => ({ status: 'ready' }))
  app.get('/metrics', async (_req, reply) => { reply.type(registry.contentType); return registry.metrics() })

  app.addHook('onResponse', async (req, reply) => {
    const spec = req.routeOptions.config as { lane?: string }
    duration.observe({ lane: spec.lane ?? 'none', route: req.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) }, reply.elapsedTime / 1000)
  })

  for (const spec of ROUTES) {
    app.route({
      method: spec.method,
      url: spec.url,
      config: { lane: spec.lane },
      schema: spec.body ? { body: spec.body } : {},
      // Authentication and the Idempotency-Key come before body parsing and validation.
      onRequest: async req => {
        const clientId = authenticate(req, cfg.keys)
        ;(req as FastifyRequest & { clientId?: string }).clientId = clientId
        if (spec.method === 'POST') {
          const key = req.headers['idempotency-key']
          if (typeof key !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(key)) throw new AppError('ERR_IDEMPOTENCY_KEY_REQUIRED', { detail: 'Idempotency-Key header (1-255 visible ASCII characters) is required on POST' })
        }
      },
      // Before schema validation: a PAN anywhere is refused as such, whatever else is wrong.
      preValidation: async req => {
        const fields = panFields(req.body)
        if (fields.length > 0) throw new AppError('ERR_PAN_NOT_ACCEPTED', { detail: `fields ${fields.join(', ')} hold a raw card number; send a card token`, extensions: { fields } })
      },
      handler: (req, reply) => proxy(req, reply, spec, upstreams[spec.lane], unavailable),
    })
  }

  app.addHook('onClose', async () => { await closeUpstreams(upstreams) })
  return { app, registry, upstreams }
}

async function proxy (req: FastifyRequest, reply: FastifyReply, spec: RouteSpec, up: Upstream, unavailable: client.Counter<'lane' | 'reason'>): Promise<unknown> {
  if (up.inflight >= up.cap) {
    unavailable.inc({ lane: up.lane, reason: 'cap_full' })
    throw new AppError('ERR_LANE_UNAVAILABLE', { detail: `lane ${up.lane} has ${up.inflight} requests in flight at the gateway (cap ${up.cap})` })
  }
  up.inflight++
  const ac = new AbortController()
  const onClose = (): void => { if (!reply.raw.writableFinished) ac.abort() }
  reply.raw.on('close', onClose)
  try {
    const headers: Record<string, string> = {
      'x-request-id': req.id,
      'x-client-id': (req as FastifyRequest & { clientId: string }).clientId,
    }
    const key = req.headers['idempotency-key']
    if (typeof key === 'string') headers['idempotency-key'] = key
    let body: string | undefined
    if (spec.method === 'POST') { headers['content-type'] = 'application/json'; body = JSON.stringify(req.body) }
    const res = await up.pool.request({ method: spec.method, path: req.url, headers, body, signal: ac.signal })
    const payload = Buffer.from(await res.body.arrayBuffer())
    for (const [k, v] of Object.entries(res.headers)) {
      if (v !== undefined && !DROP_RESPONSE.has(k)) reply.header(k, v)
    }
    return reply.code(res.statusCode).send(payload)
  } catch (err) {
    if (ac.signal.aborted) return reply.hijack()
    const code = (err as { code?: string }).code ?? 'error'
    unavailable.inc({ lane: up.lane, reason: code })
    req.log.warn({ lane: up.lane, code }, 'lane unavailable')
    throw new AppError('ERR_LANE_UNAVAILABLE', { detail: `lane ${up.lane} is unavailable (${code})` })
  } finally {
    up.inflight--
    reply.raw.off('close', onClose)
  }
}

