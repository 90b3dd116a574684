// Card authorization: a hold on the card account's available funds, exactly once
// per (client, Idempotency-Key). All of it is one SQL function call in one
// transaction (shared/db/migrations/0002_card-auth.sql), so the lane holds no
// transaction open across anything but its own SQL.
import crypto from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { AuthorizationRequest } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import type { LaneKit } from '../../shared/lane-kit/build-lane-app.ts'
import { storedResponseRoute } from '../../shared/lane-kit/stored-response.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import type { LaneRejectReason } from '../../shared/metrics.ts'
import { rateLimitFields } from '../../shared/rate-limit-fields.ts'

function saturated (reason: LaneRejectReason): never {
  throw new AppError('ERR_CARD_AUTH_SATURATED', {
    detail: reason === 'queue_timeout' ? 'waited past the queue budget for a permit' : 'all permits busy and the queue is full',
    ...rateLimitFields({ name: 'card-auth', quota: 1, windowSeconds: 1, resetSeconds: 1 }),
  })
}

export function cardAuthRoutes (app: FastifyInstance, kit: LaneKit): void {
  app.post('/v1/authorizations', { schema: { body: AuthorizationRequest } }, kit.admitted(async (req: FastifyRequest, exec) => {
    const client = clientIdOf(req)
    const key = idempotencyKeyOf(req)
    const body = req.body as AuthorizationRequest
    const fp = fingerprint(body)
    const { rows } = await exec.db.query<{ id: string, fingerprint: string, response: unknown, replayed: boolean }>(
      'select * from card_auth.authorize($1, $2, $3, $4, $5, $6, $7, $8)',
      [crypto.randomUUID(), client, key, fp, body.merchantId, body.cardToken, body.amount.value, body.amount.currency],
    )
    const row = rows[0]!
    if (row.replayed) return replay({ fingerprint: row.fingerprint, response: row.response, status: 201 }, fp)
    return { status: 201, body: row.response, headers: { location: `/v1/authorizations/${row.id}` } }
  }, saturated))

  storedResponseRoute(app, kit, { url: '/v1/authorizations/:id', table: 'card_auth.authorizations', what: 'authorization', onReject: saturated })
}
