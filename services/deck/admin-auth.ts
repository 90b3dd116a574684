// Admin authentication: `Authorization: Bearer <ADMIN_TOKEN>` on every /admin
// route. Both sides are hashed to a fixed length before timingSafeEqual, so the
// comparison takes the same time whatever the given token's length or content.
import crypto from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { AppError } from '../../shared/errors.ts'

const digest = (s: string): Buffer => crypto.createHash('sha256').update(s).digest()
const OPERATOR = /^[\p{L}\p{N} ._@-]{1,64}$/u

export interface Operator { operator: string, ip: string, requestId: string }

export function adminGuard (token: string) {
  const expected = digest(token)
  return function requireAdmin (req: FastifyRequest): Operator {
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
