// The Fastify options every process shares: request ids, strict JSON schemas
// (no coercion, unknown fields rejected by the schemas), problem+json errors,
// and logs that never carry bodies or credentials.
import crypto from 'node:crypto'
import { createRequire } from 'node:module'
import type { IncomingMessage, ServerResponse } from 'node:http'
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify'
import { Type } from 'typebox'
import { loadConfig } from './config.ts'
import { AppError } from './errors.ts'
import { installProblemHandlers, problemBody } from './problem.ts'
import { LOG_FORMATS } from './log-formats.ts'

export interface HttpAppOptions {
  logger?: FastifyServerOptions['logger']
  bodyLimit?: number
  /** Close in-flight connections on close() instead of waiting for them. */
  forceCloseConnections?: boolean
  /** Bounds on reading away the rest of a body that was answered early (see drainRequest). */
  drain?: DrainBounds
}

export interface DrainBounds { maxBytes: number, maxMs: number, lingerMs: number }

/**
 * An answer sent before the request body is in (413 on Content-Length, 401, 429,
 * 415, ...) waits until the rest of the body has been read and thrown away, up to
 * `maxBytes` or `maxMs`. Without this, Node closes the socket right after the
 * answer while the client is still sending; the kernel then resets the
 * connection (a close with unread data sends RST) and the client can lose the
 * answer (undici fetch with a streamed body gets EPIPE instead of the 413).
 * Past either bound the answer goes with `Connection: close`, and the close
 * lingers: the answer and a FIN go first, and the socket is destroyed `lingerMs`
 * later, reading nothing more (lingerAfter), so a client still sending gets to
 * read the answer first, which a socket destroyed at once does not guarantee.
 * A client sending a huge or endless body holds the socket for `maxMs +
 * lingerMs` at most after its headers.
 */
export const DRAIN_DEFAULTS: Readonly<DrainBounds> = Object.freeze({
  maxBytes: 8 * 1024 * 1024, maxMs: 5_000, lingerMs: 1_000,
})

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
    // Fastify logs two info lines per request: under load that is most of a
    // lane's logging CPU, and at idle the health checks alone flood the log.
    // One line per request at debug instead (below), none for health and metrics.
    logController: new LogController({ disableRequestLogging: true }),
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false, useDefaults: true } },
  })
  const drain = opts.drain ?? DRAIN_DEFAULTS
  // Hooks run on every request: callback style, so none allocates a promise.
  app.addHook('onSend', (req, reply, payload, done) => {
    reply.header('x-request-id', req.id)
    // Answered before the whole body arrived: read the rest away first (bounded), or close.
    if (req.raw.complete) return done(null, payload)
    drainRequest(req.raw, drain).then(clean => {
      if (!clean) { reply.header('connection', 'close'); lingerAfter(req.raw, reply.raw, drain) }
      done(null, payload)
    }, done)
  })
  app.addHook('onResponse', (req, reply, done) => {
    if (!OPS_PATH.test(req.url)) req.log.debug({ req, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 100) / 100 }, 'request')
    done()
  })
  let closing = false
  app.addHook('preClose', (done) => { closing = true; done() })
  app.addHook('onRequest', (_req, reply, done) => {
    if (!closing) return done()
    reply.header('connection', 'close')
    done(new AppError('ERR_SHUTTING_DOWN'))
  })
  // JSON only: Fastify's default text/plain parser would let a string body reach validation.
  app.removeContentTypeParser('text/plain')
  installProblemHandlers(app)
  return app
}

/** The whole request has arrived (`readableEnded` too: a request not from a socket has no `complete`). */
const bodyIn = (raw: IncomingMessage): boolean => raw.complete || raw.readableEnded

/**
 * Read and discard what is left of a request body, at most `maxBytes` more or for
 * `maxMs`. True when the body ended (the connection is clean and may be reused),
 * false when a bound was hit or the client went away; then reading stops, so the
 * caller must close the connection.
 */
export function drainRequest (raw: IncomingMessage, bounds: DrainBounds): Promise<boolean> {
  if (bodyIn(raw)) return Promise.resolve(true)
  if (raw.destroyed) return Promise.resolve(false)
  return new Promise(resolve => {
    let bytes = 0
    const finish = (clean: boolean): void => {
      clearTimeout(timer)
      raw.off('data', onData).off('end', onEnd).off('error', onGone).off('close', onGone)
      if (!clean) raw.pause()
      resolve(clean)
    }
    const onData = (chunk: Buffer): void => { bytes += chunk.length; if (bytes > bounds.maxBytes) finish(false) }
    const onEnd = (): void => finish(true)
    const onGone = (): void => finish(bodyIn(raw))
    const timer = setTimeout(() => finish(false), bounds.maxMs)
    raw.on('data', onData).once('end', onEnd).once('error', onGone).once('close', onGone)
    raw.resume()
  })
}

/**
 * Once `res` (sent with Connection: close) is written, Node's server ends the
 * socket (the answer, then a FIN) and destroys it as soon as that is flushed:
 * with the client's unread bytes in the socket, the destroy sends RST, and a
 * client busy writing loses the answer it was sent. Here the destroy waits
 * `lingerMs` (or until the client closes), with nothing more read: the client's
 * writes block, so it turns to reading and finds the answer. Only the pending
 * 'finish' -> destroy that Node's destroySoon() put on this socket is removed.
 */
function lingerAfter (req: IncomingMessage, res: ServerResponse, bounds: DrainBounds): void {
  const socket = req.socket
  res.once('finish', () => {
    if (socket.destroyed) return
    socket.removeListener('finish', socket.destroy)
    socket.pause()
    const timer = setTimeout(() => socket.destroy(), bounds.lingerMs)
    timer.unref()
    socket.once('close', () => clearTimeout(timer))
  })
}

/**
 * How a process logs, from its environment through the config schema (a bad
 * value stops it with ERR_CONFIG_INVALID). LOG_FORMAT=pretty is for a person at
 * a terminal: `npm start` sets it for its children when its own stdout is a
 * TTY; anything else (tests, containers, a pipe) gets JSON lines.
 */
export const LOG_SCHEMA = Type.Object({
  LOG_LEVEL: Type.Union(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map(l => Type.Literal(l)), { default: 'info' }),
  LOG_FORMAT: Type.Union(LOG_FORMATS.map(f => Type.Literal(f)), { default: 'json', description: 'json lines, or pretty (pino-pretty) for a terminal' }),
})

/**
 * Logger settings for a process: named after the process (the fleet's
 * processes share the supervisor's terminal), no request bodies, no secrets.
 */
export function loggerOptions (name: string, env: Record<string, string | undefined> = process.env): FastifyServerOptions['logger'] {
  const log = loadConfig(LOG_SCHEMA, env)
  return {
    name,
    level: log.LOG_LEVEL,
    // pino-pretty as a synchronous stream in this thread (no transport worker),
    // loaded only when asked for: JSON runs never load it.
    ...(log.LOG_FORMAT === 'pretty' ? { stream: prettyStream() } : {}),
    redact: { paths: ['req.headers.authorization', 'req.headers["x-admin-token"]', 'headers.authorization'], censor: '[redacted]' },
    serializers: {
      // Only the path, never the query string: a client could put anything there.
      req: (req: { method: string, url: string, id: string }) => ({ method: req.method, path: req.url.split('?')[0], id: req.id }),
    },
  }
}

function prettyStream (): NodeJS.WritableStream {
  const require = createRequire(import.meta.url)
  const pretty = require('pino-pretty') as typeof import('pino-pretty')
  // One line per entry: time, level, process name, message, then the entry's other fields.
  return pretty.build({ sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true })
}
