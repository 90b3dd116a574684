// The gateway: authenticate, guard against retry storms, refuse raw card
// numbers, validate at the edge, then proxy to the lane that owns the route.
// It holds no database connection and no lane state; the lane, not the gateway,
// decides admission.
import type { FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import swagger from '@fastify/swagger'
import underPressure from '@fastify/under-pressure'
import client from 'prom-client'
import { IdParams, Problem } from '../shared/api-schemas.ts'
import { createHttpApp } from '../shared/http-app.ts'
import { problemReply } from '../shared/problem.ts'
import { AppError } from '../shared/errors.ts'
import { LATENCY_BUCKETS, createRegistry } from '../shared/metrics.ts'
import { registerProcessOps } from '../shared/process-ops.ts'
import { saturationError, type LaneLimits, type LaneName } from '../shared/lanes.ts'
import { rateLimitFields } from '../shared/rate-limit-fields.ts'
import { panFields } from '../shared/pan.ts'
import { ROUTES, type RouteSpec } from './classify.ts'
import { createUpstreams, closeUpstreams, LANE_ANSWER_MAX_BYTES, type Upstream } from './upstreams.ts'
import { authenticate, type KeySource } from './auth.ts'
import { RETRY_GUARD_DEFAULTS, retryGuard, type RetryGuardConfig } from './retry-guard.ts'

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
}

// Hop-by-hop and internal headers never cross the gateway.
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'x-request-id'])
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/

export async function buildApp (cfg: GatewayConfig) {
  const app = createHttpApp({ logger: cfg.logger })
  const registry = createRegistry('gateway')
  const upstreams = createUpstreams(cfg.limits, cfg.laneUrls)
  new client.Gauge({ name: 'gateway_upstream_inflight', help: 'Requests in flight to each lane', labelNames: ['lane'], registers: [registry], collect () { for (const u of Object.values(upstreams)) this.set({ lane: u.lane }, u.inflight) } })
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
  await app.register(underPressure, {
    maxEventLoopDelay: cfg.maxEventLoopDelayMs ?? 500,
    maxHeapUsedBytes: cfg.maxHeapUsedBytes ?? 0,
    maxRssBytes: cfg.maxRssBytes ?? 0,
    retryAfter: 1,
    pressureHandler: (_req, reply, type) => {
      shed.inc({ reason: 'under_pressure' })
      return problemReply(reply, new AppError('ERR_GATEWAY_OVERLOADED', { detail: `gateway under pressure (${type})`, headers: overloaded.headers, extensions: overloaded.extensions })) as unknown as void
    },
  })
  const guard = await retryGuard(app, cfg.retry ?? RETRY_GUARD_DEFAULTS, reason => blocked.inc({ reason }))
  // The fleet's one rejection counter, by lane and reason: what the gateway refuses
  // on a lane's behalf (retry storms, a lane down, its cap full) counts there too.
  const rejected = new client.Counter({ name: 'bulkhead_rejection_total', help: 'Requests rejected before reaching the lane, by reason', labelNames: ['lane', 'reason'], registers: [registry] })
  const counters: ProxyCounters = {
    unavailable: l => { unavailable.inc(l); rejected.inc({ lane: l.lane, reason: 'lane_unavailable' }) },
    saturated: lane => rejected.inc({ lane, reason: 'gateway_cap' }),
  }

  const ops = { schema: { hide: true }, config: { pressureHandler: () => undefined } }
  registerProcessOps(app, { registry, routeOptions: ops })
  app.get('/openapi.json', ops, async () => app.swagger())

  app.addHook('onResponse', (req, reply, done) => {
    const spec = req.routeOptions.config as { lane?: string }
    duration.observe({ lane: spec.lane ?? 'none', route: req.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) }, reply.elapsedTime / 1000)
    done()
  })

  // Bodies are parsed (for validation and the PAN scan) as Fastify would, and the
  // bytes the client sent are what the lane receives: no second serialization.
  const json = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    ;(req as FastifyRequest & { rawBody?: string }).rawBody = body as string
    json(req, body as string, done)
  })

  for (const spec of ROUTES) {
    app.route({
      method: spec.method,
      url: spec.url,
      config: { lane: spec.lane },
      schema: {
        summary: spec.summary,
        tags: [spec.lane],
        ...(spec.body ? { body: spec.body, headers: { type: 'object', properties: { 'idempotency-key': { type: 'string', description: 'required on POST: 1-255 visible ASCII characters' } } } } : { params: IdParams }),
        response: { [spec.success.status]: spec.success.schema, '4xx': Problem, '5xx': Problem },
      },
      // Identity, Idempotency-Key and the retry guard come before the body is even parsed.
      onRequest: async req => {
        ;(req as FastifyRequest & { clientId?: string }).clientId = authenticate(req, cfg.keys)
        if (spec.method === 'POST') {
          const key = req.headers['idempotency-key']
          if (typeof key !== 'string' || !IDEMPOTENCY_KEY.test(key)) throw new AppError('ERR_IDEMPOTENCY_KEY_REQUIRED', { detail: 'Idempotency-Key header (1-255 visible ASCII characters) is required on POST' })
        }
        try {
          await guard(req)
        } catch (err) {
          rejected.inc({ lane: spec.lane, reason: (err as AppError).code === 'ERR_CLIENT_RATE_LIMITED' ? 'client_rate' : 'retry_storm' })
          throw err
        }
      },
      // Before schema validation: a PAN anywhere is refused as such, whatever else is wrong.
      preValidation: async req => {
        const fields = panFields(req.body)
        if (fields.length > 0) throw new AppError('ERR_PAN_NOT_ACCEPTED', { detail: `fields ${fields.join(', ')} hold a raw card number; send a card token`, extensions: { fields } })
      },
      handler: (req, reply) => proxy(req, reply, spec, upstreams[spec.lane], counters),
    })
  }

  app.addHook('onClose', async () => { await closeUpstreams(upstreams) })
  return { app, registry, upstreams }
}

interface ProxyCounters {
  unavailable (labels: { lane: string, reason: string }): void
  saturated (lane: LaneName): void
}

async function proxy (req: FastifyRequest, reply: FastifyReply, spec: RouteSpec, up: Upstream, count: ProxyCounters): Promise<unknown> {
  if (up.inflight >= up.cap) {
    const detail = `lane ${up.lane} has ${up.inflight} requests in flight at the gateway (cap ${up.cap})`
    // DESIGN §2: a full cap on a lane that is up is saturation, answered as the
    // lane would; a lane whose last request failed at the transport is down.
    if (!up.reachable) {
      count.unavailable({ lane: up.lane, reason: 'cap_full' })
      throw new AppError('ERR_LANE_UNAVAILABLE', { detail: `${detail}, and it is not answering` })
    }
    count.saturated(up.lane)
    throw saturationError(up.lane, detail, { name: `gateway-${up.lane}`, quota: up.cap })
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
    if (spec.method === 'POST') { headers['content-type'] = 'application/json'; body = (req as FastifyRequest & { rawBody?: string }).rawBody ?? JSON.stringify(req.body) }
    const res = await up.pool.request({ method: spec.method, path: req.url, headers, body, signal: ac.signal })
    // Read whole (at most LANE_ANSWER_MAX_BYTES, undici's maxResponseSize), then
    // sent: the client gets the lane's whole answer or a problem+json, never an
    // answer cut off halfway by a lane that failed mid-body.
    const payload = Buffer.from(await res.body.arrayBuffer())
    up.reachable = true
    for (const [k, v] of Object.entries(res.headers)) {
      if (v !== undefined && !DROP_RESPONSE.has(k)) reply.header(k, v)
    }
    return reply.code(res.statusCode).send(payload)
  } catch (err) {
    if (ac.signal.aborted) return reply.hijack()
    const code = (err as { code?: string }).code ?? 'error'
    if (code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') {
      req.log.error({ lane: up.lane }, 'lane answer over the limit')
      throw new AppError('ERR_LANE_ANSWER_TOO_LARGE', { detail: `lane ${up.lane} answered with more than ${LANE_ANSWER_MAX_BYTES} bytes` })
    }
    up.reachable = false
    count.unavailable({ lane: up.lane, reason: code })
    req.log.warn({ lane: up.lane, code }, 'lane unavailable')
    throw new AppError('ERR_LANE_UNAVAILABLE', { detail: `lane ${up.lane} is unavailable (${code})` })
  } finally {
    up.inflight--
    reply.raw.off('close', onClose)
  }
}
