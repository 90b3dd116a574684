// Card authorization: a hold on the card account's available funds, exactly once
// per (client, Idempotency-Key). All of it is one SQL function call in one
// transaction (shared/db/migrations/0006_card-auth-single-write.sql), so the lane
// holds no transaction open across anything but its own SQL. A retry of a key
// whose first attempt is still running gets 409 ERR_IDEMPOTENCY_IN_PROGRESS.
import crypto from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { AuthorizationRequest, IdParams } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import type { LaneKit } from '../../shared/lane-kit/build-lane-app.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import type { LaneRejectReason } from '../../shared/metrics.ts'
import { AUTHORIZATION_COLUMNS, authorizationBody, type AuthorizationRow } from './authorization.ts'
import { saturationError } from '../../shared/lanes.ts'

// Named: parsed and planned once per connection, not once per authorization.
const AUTHORIZE = { name: 'card_auth.authorize', text: 'select * from card_auth.authorize($1, $2, $3, $4, $5, $6, $7, $8)' }

export function cardAuthRoutes (app: FastifyInstance, kit: LaneKit): void {
  // 429 with the lane's own policy: its permits, room again within the Retry-After.
  const saturated = (reason: LaneRejectReason): never => {
    throw saturationError('card-auth', reason === 'queue_timeout' ? 'waited past the queue budget for a permit' : 'all permits busy and the queue is full', { name: 'card-auth', quota: kit.limits.permits })
  }
  app.post('/v1/authorizations', { schema: { body: AuthorizationRequest } }, kit.admitted(async (req: FastifyRequest, exec) => {
    const client = clientIdOf(req)
    const key = idempotencyKeyOf(req)
    const body = req.body as AuthorizationRequest
    const fp = fingerprint(body)
    const { rows } = await exec.db.query<AuthorizationRow & { fingerprint: string, replayed: boolean, in_progress: boolean }>(
      AUTHORIZE,
      [crypto.randomUUID(), client, key, fp, body.merchantId, body.cardToken, body.amount.value, body.amount.currency],
    )
    const row = rows[0]!
    if (row.in_progress) throw new AppError('ERR_IDEMPOTENCY_IN_PROGRESS', { detail: 'an authorization with this Idempotency-Key is still being processed; retry after a second to get its answer' })
    if (row.replayed) return replay({ fingerprint: row.fingerprint, response: authorizationBody(row), status: 201 }, fp)
    return { status: 201, body: authorizationBody(row), headers: { location: `/v1/authorizations/${row.id}` } }
  }, saturated))

  app.get('/v1/authorizations/:id', { schema: { params: IdParams } }, kit.admitted(async (req: FastifyRequest, exec) => {
    const { id } = req.params as { id: string }
    const { rows } = await exec.db.query<AuthorizationRow>(`select ${AUTHORIZATION_COLUMNS} from card_auth.authorizations where id = $1 and client_id = $2`, [id, clientIdOf(req)])
    if (!rows[0]) throw new AppError('ERR_NOT_FOUND', { detail: `no authorization ${id}` })
    return { status: 200, body: authorizationBody(rows[0]) }
  }, saturated))
}
