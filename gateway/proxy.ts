// The data-plane routes of the gateway, a Fastify plugin: for each route of
// the table (gateway/classify.ts) identity, Idempotency-Key and the retry guard
// before the body is read, the PAN scan before validation, then the proxy to
// the lane that owns the route, through that lane's own undici pool.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type client from 'prom-client'
import type { Dispatcher } from 'undici'
import { IdParams, Problem } from '../shared/api-schemas.ts'
import { AppError } from '../shared/errors.ts'
import { saturationError, type LaneName } from '../shared/lanes.ts'
import { panFields } from '../shared/pan.ts'
import { authenticate, type KeySource } from './auth.ts'
import { isRehearsal } from './warm-up.ts'
import { WARM_UP_HEADER } from '../shared/lane-kit/warm-up.ts'
import { ROUTES, type RouteSpec } from './classify.ts'
import type { Replica } from './replica-set.ts'
import { LANE_ANSWER_MAX_BYTES, type Upstream } from './upstreams.ts'
import { clientSpan, endClientSpan, failed, traceOf } from '../shared/tracing.ts'

// Hop-by-hop and internal headers never cross the gateway.
const DROP_RESPONSE = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'x-request-id'])
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/

export interface LaneRoutesOptions {
  upstreams: Record<LaneName, Upstream>
  keys: KeySource
  /** bulkhead_rejection_total: what the gateway refuses on a lane's behalf. */
  rejected: client.Counter<'lane' | 'reason'>
  counters: ProxyCounters
  /** Pass the lanes' Server-Timing on, with the gateway's own time; off: neither. */
  serverTiming: boolean
}

export const laneRoutes: FastifyPluginAsync<LaneRoutesOptions> = async (app, opts) => {
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
        const clientId = authenticate(req, opts.keys)
        ;(req as FastifyRequest & { clientId?: string }).clientId = clientId
        if (spec.method === 'POST') {
          const key = req.headers['idempotency-key']
          if (typeof key !== 'string' || !IDEMPOTENCY_KEY.test(key)) throw new AppError('ERR_IDEMPOTENCY_KEY_REQUIRED', { detail: 'Idempotency-Key header (1-255 visible ASCII characters) is required on POST' })
        }
        try {
          await app.retryGuard(req)
        } catch (err) {
          opts.rejected.inc({ lane: spec.lane, reason: (err as AppError).code === 'ERR_CLIENT_RATE_LIMITED' ? 'client_rate' : 'retry_storm' })
          throw err
        }
      },
      // Before schema validation: a PAN anywhere is refused as such, whatever else is wrong.
      preValidation: async req => {
        const fields = panFields(req.body)
        if (fields.length > 0) throw new AppError('ERR_PAN_NOT_ACCEPTED', { detail: `fields ${fields.join(', ')} hold a raw card number; send a card token`, extensions: { fields } })
      },
      handler: (req, reply) => proxy(req, reply, spec, opts.upstreams[spec.lane], opts.counters, opts.serverTiming),
    })
  }
}

export interface ProxyCounters {
  unavailable (labels: { lane: string, reason: string }): void
  saturated (lane: LaneName): void
}

/** A lane's whole answer, as read by `LaneCall`. */
interface LaneAnswer { status: number, headers: Record<string, string | string[] | undefined>, body: Buffer }

/**
 * One request to a lane through undici's dispatch API: the answer is collected
 * whole (at most the pool's maxResponseSize) into a Buffer. Cheaper per request
 * than `pool.request`, which builds an AbortSignal listener and a body stream
 * for every call; a client that goes away cancels it with `cancel()`.
 */
class LaneCall implements Dispatcher.DispatchHandler {
  readonly answer: Promise<LaneAnswer>
  #resolve!: (a: LaneAnswer) => void
  #reject!: (e: unknown) => void
  #controller: Dispatcher.DispatchController | undefined
  #cancelled = false
  #status = 0
  #headers: Record<string, string | string[] | undefined> = {}
  #chunks: Buffer[] = []

  constructor () {
    this.answer = new Promise<LaneAnswer>((resolve, reject) => { this.#resolve = resolve; this.#reject = reject })
  }

  /** The client went away: the lane's socket is closed if the request is on it, and the answer never comes. */
  get cancelled (): boolean { return this.#cancelled }

  cancel (): void {
    this.#cancelled = true
    this.#controller?.abort(new Error('client disconnected'))
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#cancelled) controller.abort(new Error('client disconnected'))
  }

  onResponseStart (
    _c: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>
  ): void {
    if (statusCode < 200) return // 1xx: the answer is still to come
    this.#status = statusCode
    this.#headers = headers
  }

  onResponseData (_c: Dispatcher.DispatchController, chunk: Buffer): void { this.#chunks.push(chunk) }

  onResponseEnd (): void {
    const body = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks)
    this.#resolve({ status: this.#status, headers: this.#headers, body })
  }

  onResponseError (_c: Dispatcher.DispatchController, err: Error): void { this.#reject(err) }
}

// Transport errors where the request never reached the replica: it is safe to
// send it to another one (a replica just killed or not yet listening).
const NOT_SENT = new Set(['ECONNREFUSED', 'UND_ERR_CONNECT_TIMEOUT', 'EHOSTUNREACH', 'ENETUNREACH'])

/** The lane's answer from replica `r`, counted in its in-flight while it is out. */
async function callReplica (
  up: Upstream, r: Replica, opts: Dispatcher.DispatchOptions, call: LaneCall
): Promise<LaneAnswer> {
  r.inflight++
  r.requests++
  try {
    r.pool.dispatch(opts, call)
    const res = await call.answer
    up.replicas.answered(r)
    return res
  } catch (err) {
    if ((err as { code?: string }).code !== 'UND_ERR_RES_EXCEEDED_MAX_SIZE' && !call.cancelled) up.replicas.failed(r)
    throw err
  } finally {
    r.inflight--
  }
}

async function proxy (
  req: FastifyRequest, reply: FastifyReply, spec: RouteSpec, up: Upstream, count: ProxyCounters, serverTiming: boolean
): Promise<unknown> {
  let replica = up.replicas.pick()
  if (!replica) {
    const known = up.replicas.replicas.length
    // DESIGN §2: a full cap on a lane that is up is saturation, answered as the
    // lane would; a lane whose last request failed at the transport is down.
    if (known === 0) {
      count.unavailable({ lane: up.lane, reason: 'no_replica' })
      throw new AppError('ERR_LANE_UNAVAILABLE', { detail: `lane ${up.lane} has no replica (${up.replicas.resolveError ?? 'none found'})` })
    }
    const detail = `lane ${up.lane} has ${up.inflight} requests in flight at the gateway (cap ${up.cap} on each of ${known} replicas)`
    if (!up.reachable) {
      count.unavailable({ lane: up.lane, reason: 'cap_full' })
      throw new AppError('ERR_LANE_UNAVAILABLE', { detail: `${detail}, and it is not answering` })
    }
    count.saturated(up.lane)
    throw saturationError(up.lane, detail, { name: `gateway-${up.lane}`, quota: up.cap * known })
  }
  let call = new LaneCall()
  let gone = false
  const onClose = (): void => { if (!reply.raw.writableFinished) { gone = true; call.cancel() } }
  reply.raw.on('close', onClose)
  const headers: Record<string, string> = {
    'x-request-id': req.id,
    'x-client-id': (req as FastifyRequest & { clientId: string }).clientId,
  }
  // The hop to the lane, when tracing is on: its traceparent makes the lane's spans children of this one.
  const span = clientSpan(`lane ${up.lane}`, { 'watertight.lane': up.lane }, headers, traceOf(req))
  try {
    const key = req.headers['idempotency-key']
    if (typeof key === 'string') headers['idempotency-key'] = key
    // Only the gateway's own warm-up marks a request so; a client's header of that name is never passed on.
    headers[WARM_UP_HEADER] = isRehearsal(req) ? '1' : '0'
    let body: string | undefined
    if (spec.method === 'POST') { headers['content-type'] = 'application/json'; body = (req as FastifyRequest & { rawBody?: string }).rawBody ?? JSON.stringify(req.body) }
    const opts = { method: spec.method, path: req.url, headers, body }
    // Read whole (at most LANE_ANSWER_MAX_BYTES, undici's maxResponseSize), then
    // sent: the client gets the lane's whole answer or a problem+json, never an
    // answer cut off halfway by a lane that failed mid-body.
    let res: LaneAnswer
    try {
      res = await callReplica(up, replica, opts, call)
    } catch (err) {
      const other = NOT_SENT.has((err as { code?: string }).code ?? '') && !gone ? up.replicas.pick(replica) : undefined
      if (!other) throw err
      replica = other
      call = new LaneCall()
      res = await callReplica(up, replica, opts, call)
    }
    up.reachable = true
    span?.setAttribute('server.address', replica.address)
    endClientSpan(span, res.status)
    for (const k in res.headers) {
      const v = res.headers[k]
      if (v !== undefined && !DROP_RESPONSE.has(k) && k !== 'server-timing') reply.header(k, v)
    }
    // A lane that timed its answer (a shed one: admission's Server-Timing) gets the
    // gateway's own time beside it, from the request's arrival here to its answer
    // ready to send, so a slow shed answer can be placed: in the lane, in the
    // gateway and the hop, or beyond it. Only those answers: none on the card path.
    // How long each hop of ours took is for our drills, not for the public API.
    const timing = res.headers['server-timing']
    if (serverTiming && typeof timing === 'string') reply.header('server-timing', `${timing}, gateway;dur=${reply.elapsedTime.toFixed(3)}`)
    return reply.code(res.status).send(res.body)
  } catch (err) {
    failed(span, err)
    span?.end()
    if (gone) return reply.hijack()
    const code = (err as { code?: string }).code ?? 'error'
    if (code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') {
      req.log.error({ lane: up.lane }, 'lane answer over the limit')
      throw new AppError('ERR_LANE_ANSWER_TOO_LARGE', { detail: `lane ${up.lane} answered with more than ${LANE_ANSWER_MAX_BYTES} bytes` })
    }
    up.reachable = false
    count.unavailable({ lane: up.lane, reason: code })
    req.log.warn({ lane: up.lane, replica: replica.address, code }, 'lane unavailable')
    throw new AppError('ERR_LANE_UNAVAILABLE', { detail: `lane ${up.lane} is unavailable (${code})` })
  } finally {
    reply.raw.off('close', onClose)
  }
}
