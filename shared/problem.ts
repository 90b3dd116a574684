// RFC 9457 problem+json rendering, in one place for every process.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AppError, ERRORS, isAppError, type ErrorCode } from './errors.ts'

export const PROBLEM_CONTENT_TYPE = 'application/problem+json'
const TYPE_BASE = 'https://watertight.dev/problems/'

export interface ProblemBody {
  type: string
  title: string
  status: number
  detail: string
  instance: string
  code: ErrorCode
  [member: string]: unknown
}

export function problemBody (err: AppError, instance: string): ProblemBody {
  const spec = ERRORS[err.code] as { type?: string }
  return {
    type: TYPE_BASE + (spec.type ?? err.code.slice(4).toLowerCase().replaceAll('_', '-')),
    title: ERRORS[err.code].title,
    status: err.status,
    detail: err.detail,
    instance,
    code: err.code,
    ...err.extensions,
  }
}

/** Set status and headers for a problem and return its body, for callers that send it themselves. */
export function problemReply (reply: FastifyReply, err: AppError): ProblemBody {
  for (const [k, v] of Object.entries(err.headers)) reply.header(k, v)
  reply.code(err.status).type(PROBLEM_CONTENT_TYPE)
  // The occurrence is named by its request id, never by echoing the URL (it could hold anything).
  return problemBody(err, `urn:watertight:request:${reply.request.id}`)
}

export function sendProblem (reply: FastifyReply, err: AppError): FastifyReply {
  return reply.send(problemReply(reply, err))
}

/** Map Fastify's own errors (validation, body parsing) onto registry codes. */
export function toAppError (err: FastifyError | Error): AppError {
  if (isAppError(err)) return err
  const fe = err as FastifyError
  if (fe.validation) {
    return new AppError('ERR_VALIDATION', {
      detail: fe.message,
      extensions: { errors: fe.validation.map(v => ({ path: v.instancePath || '/', message: v.message, params: v.params })) },
    })
  }
  // PostgreSQL cancelled the statement: the role's statement_timeout ran out.
  if (fe.code === '57014') return new AppError('ERR_DEADLINE_EXCEEDED', { detail: 'a database statement ran past its timeout' })
  // The lane's role has no connection left (its CONNECTION LIMIT): capacity, not a bug.
  if (fe.code === '53300') return new AppError('ERR_LANE_OVERLOADED', { detail: 'no database connection of this lane is free' })
  switch (fe.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE': return new AppError('ERR_PAYLOAD_TOO_LARGE')
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE': return new AppError('ERR_UNSUPPORTED_MEDIA_TYPE')
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH': return new AppError('ERR_VALIDATION', { detail: 'Content-Length does not match the body' })
    case 'FST_ERR_CTP_EMPTY_JSON_BODY': return new AppError('ERR_MALFORMED_JSON', { detail: 'Body is empty' })
    case 'FST_ERR_CTP_INVALID_JSON_BODY': return new AppError('ERR_MALFORMED_JSON')
    default: break
  }
  if (err instanceof SyntaxError || fe.statusCode === 400) return new AppError('ERR_MALFORMED_JSON', { detail: 'Body could not be parsed' })
  if (fe.statusCode === 413) return new AppError('ERR_PAYLOAD_TOO_LARGE')
  if (fe.statusCode === 415) return new AppError('ERR_UNSUPPORTED_MEDIA_TYPE')
  return new AppError('ERR_INTERNAL', { detail: 'Internal error', cause: err })
}

/** Install the error and not-found handlers: every error leaves as problem+json, never a stack. */
export function installProblemHandlers (app: FastifyInstance): void {
  app.setErrorHandler((err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    const appErr = toAppError(err)
    if (appErr.status >= 500 && appErr.code === 'ERR_INTERNAL') req.log.error({ err }, 'unhandled error')
    return sendProblem(reply, appErr)
  })
  app.setNotFoundHandler((req, reply) => sendProblem(reply, new AppError('ERR_NOT_FOUND', { detail: `No route ${req.method} ${req.url.split('?')[0]}` })))
}
