// Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>`, denied by
// default. The check runs in onRequest hooks, after routing, on the route the
// router chose: a hook belongs to the route, not to a spelling of its URL, so
// `/%61dmin/lanes` (which the router decodes to /admin/lanes) meets the same
// hook as `/admin/lanes`. Both sides are hashed to a fixed length before
// timingSafeEqual, so the comparison takes the same time whatever the given
// token's length or content.
import crypto from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { AppError } from '../../shared/errors.ts'

const digest = (s: string): Buffer => crypto.createHash('sha256').update(s).digest()
const OPERATOR = /^[\p{L}\p{N} ._@-]{1,64}$/u

export interface Operator { operator: string, ip: string, requestId: string }
export type RequireAdmin = (req: FastifyRequest) => Operator

export function adminGuard (token: string): RequireAdmin {
  const expected = digest(token)
  return function requireAdmin (req) {
    const h = req.headers.authorization
    const m = typeof h === 'string' ? /^Bearer (\S{1,512})$/.exec(h) : null
    if (!m || !crypto.timingSafeEqual(digest(m[1]!), expected)) {
      throw new AppError('ERR_UNAUTHENTICATED', { detail: 'Authorization: Bearer <admin token> is missing or wrong', headers: { 'www-authenticate': 'Bearer realm="watertight-deck"' } })
    }
    // Who, for the change log: the name the operator gave the page (optional), and where from.
    const named = req.headers['x-operator']
    return { operator: typeof named === 'string' && OPERATOR.test(named) ? named : 'admin', ip: req.ip, requestId: req.id }
  }
}

/** Route config of the few routes the deck serves without the token (app.ts says which, and why). */
export const OPEN = Object.freeze({ open: true })

const isOpen = (req: FastifyRequest): boolean => (req.routeOptions.config as { open?: unknown }).open === true

/**
 * Default deny for everything the deck serves: one onRequest hook at the root,
 * so it runs for every route and for the not-found handler. A route passes
 * without the token only when it was declared OPEN; an unknown path without the
 * token is 401, so a caller without it learns nothing of what exists.
 */
export const denyByDefault = fp(async function denyByDefault (app: FastifyInstance, o: { requireAdmin: RequireAdmin }) {
  app.addHook('onRequest', async (req, reply) => {
    if (isOpen(req)) return
    reply.header('cache-control', 'no-store')
    req.operator = o.requireAdmin(req)
  })
}, { name: 'deck-deny-by-default', fastify: '5.x' })

declare module 'fastify' {
  interface FastifyRequest { operator?: Operator }
}
