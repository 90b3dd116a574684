// The Fastify options every process shares: request ids, strict JSON schemas
// (no coercion, unknown fields rejected by the schemas), problem+json errors,
// and logs that never carry bodies or credentials.
import crypto from 'node:crypto'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import { AppError } from './errors.ts'
import { installProblemHandlers, problemBody } from './problem.ts'

export interface HttpAppOptions {
  logger?: FastifyServerOptions['logger']
  bodyLimit?: number
  /** Close in-flight connections on close() instead of waiting for them. */
  forceCloseConnections?: boolean
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/
// Health, status and metrics: polled every second by probes, the deck and Prometheus; never logged.
const OPS_PATH = /^\/(health\/|metrics|status)/

export function createHttpApp (opts: HttpAppOptions = {}): FastifyInstance {
  const app = Fastify({
    logger: opts.logger ?? false,
    bodyLimit: opts.bodyLimit ?? 16 * 1024,
    // A client-sent X-Request-Id is kept when it is well-formed, else a new one is made.
    genReqId: req => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : crypto.randomUUID()
    },
    // Our own 503 while draining (below) carries Retry-After and a problem body.
    return503OnClosing: false,
    // A request the HTTP parser refuses (e.g. 16 KiB of headers) still gets problem+json.
    clientErrorHandler: (err: Error & { code?: string }, socket) => {
      if (!socket.writable) return
      const appErr = err.code === 'HPE_HEADER_OVERFLOW'
        ? new AppError('ERR_HEADERS_TOO_LARGE')
        : new AppError('ERR_VALIDATION', { detail: 'malformed HTTP request' })
      const body = JSON.stringify(problemBody(appErr, 'urn:watertight:request:unparsed'))
      socket.end(`HTTP/1.1 ${appErr.status} ${appErr.status === 431 ? 'Request Header Fields Too Large' : 'Bad Request'}\r\ncontent-type: application/problem+json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
    },
    forceCloseConnections: opts.forceCloseConnections ?? 'idle',
    // Fastify logs two info lines per request: at 1,400 req/s that is most of a
    // lane's logging CPU, and at idle the health checks alone were 14 lines/s.
    // One line per request at debug instead (below), none for health and metrics.
    disableRequestLogging: true,
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false, useDefaults: true } },
  })
  app.addHook('onSend', async (req, reply) => { reply.header('x-request-id', req.id) })
  app.addHook('onResponse', async (req, reply) => {
    if (OPS_PATH.test(req.url)) return
    req.log.debug({ req, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 }, 'request')
  })
  let closing = false
  app.addHook('preClose', async () => { closing = true })
  app.addHook('onRequest', async (_req, reply) => {
    if (closing) { reply.header('connection', 'close'); throw new AppError('ERR_SHUTTING_DOWN') }
  })
  // JSON only: Fastify's default text/plain parser would let a string body reach validation.
  app.removeContentTypeParser('text/plain')
  installProblemHandlers(app)
  return app
}

/**
 * Logger settings for a process: JSON to stdout, named after the process (the
 * fleet's processes share the supervisor's terminal), no request bodies, no secrets.
 */
export function loggerOptions (name: string, level = process.env.LOG_LEVEL ?? 'info'): FastifyServerOptions['logger'] {
  return {
    name,
    level,
    redact: { paths: ['req.headers.authorization', 'req.headers["x-admin-token"]', 'headers.authorization'], censor: '[redacted]' },
    serializers: {
      // Only the path, never the query string: a client could put anything there.
      req: (req: { method: string, url: string, id: string }) => ({ method: req.method, path: req.url.split('?')[0], id: req.id }),
    },
  }
}
