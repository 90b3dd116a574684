// Card authorization: a hold on the card account's available funds, exactly once
// per (client, Idempotency-Key). Each is one call of card_auth.authorize
// (shared/db/migrations/0006, 0008), made with the others of its batch by the
// lane's group-commit writer (authorize-writer.ts), so the lane holds no
// transaction open across anything but its own SQL. A retry of a key whose
// first attempt is still running gets 409 ERR_IDEMPOTENCY_IN_PROGRESS.
import type { LaneHandler } from '../../shared/lane-kit/admission.ts'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { AuthorizationRequest, IdParams } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import { newId } from '../../shared/ids.ts'
import type { LaneKit } from '../../shared/lane-kit/build-lane-app.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import { isWarmUpRequest } from '../../shared/lane-kit/warm-up.ts'
import type { LaneRejectReason } from '../../shared/metrics.ts'
import type { FairShare } from '../../shared/bulkhead.ts'
import { fairSaturationError } from '../../shared/lane-kit/fair.ts'
import { AUTHORIZATION_COLUMNS, authorizationBody, type AuthorizationRow } from './authorization.ts'
import { authorizeOne, type AuthorizeInput, type AuthorizeOutput, type AuthorizeWriter } from './authorize-writer.ts'
import { traceOf } from '../../shared/tracing.ts'

export const cardAuthRoutes = (writer: AuthorizeWriter) => (app: FastifyInstance, kit: LaneKit): void => {
  // 429 with the lane's own policy: its permits, room again within the Retry-After;
  // refused while other merchants were in flight, also the merchant's load and fair share.
  const saturated = (reason: LaneRejectReason, _req: FastifyRequest, fair?: FairShare): never => {
    throw fairSaturationError(kit.limits, reason === 'queue_timeout' ? 'waited past the queue budget for a permit' : 'all permits busy and the queue is full', fair)
  }
  const authorize: LaneHandler = async (req: FastifyRequest, exec) => {
    const body = req.body as AuthorizationRequest
    const fp = fingerprint(body)
    // The gateway's warm-up runs this path in full, and the writer rolls it back.
    const rehearsal = isWarmUpRequest(req)
    const input: AuthorizeInput = {
      id: newId(),
      clientId: clientIdOf(req),
      key: idempotencyKeyOf(req),
      fingerprint: fp,
      merchantId: body.merchantId,
      cardToken: body.cardToken,
      amount: body.amount.value,
      currency: body.amount.currency,
      rehearsal,
    }
    let row: AuthorizeOutput | undefined
    try {
      const r = await writer.submit(input, exec.cancel, traceOf(req))
      if (!r.busy) row = r
      else if (rehearsal) throw new Error('a rehearsal\'s card account is held elsewhere')
    } catch (err) {
      // A rehearsal is never written alone: that write would not be rolled back.
      if (exec.cancel.aborted || rehearsal) throw err
      // Its batch failed (one bad element fails them all, or the writer lost its
      // connection): this one alone on the lane's pool. If the batch did commit
      // after all, the key's row is found (a replay) or still locked (409).
    }
    // Alone on the pool: its batch failed, or its card's account is held by
    // another transaction (the batch does not wait; this one does, alone).
    row ??= await authorizeOne(exec.db, input)
    if (row.in_progress) throw new AppError('ERR_IDEMPOTENCY_IN_PROGRESS', { detail: 'an authorization with this Idempotency-Key is still being processed; retry after a second to get its answer' })
    if (row.replayed) return replay({ fingerprint: row.fingerprint, response: authorizationBody(row), status: 201 }, fp)
    return { status: 201, body: authorizationBody(row), headers: { location: `/v1/authorizations/${row.id}` } }
  }
  app.post('/v1/authorizations', { schema: { body: AuthorizationRequest } }, kit.admitted(authorize, saturated))

  app.get('/v1/authorizations/:id', { schema: { params: IdParams } }, kit.admitted(async (req: FastifyRequest, exec) => {
    const { id } = req.params as { id: string }
    const { rows } = await exec.db.query<AuthorizationRow>(`select ${AUTHORIZATION_COLUMNS} from card_auth.authorizations where id = $1 and client_id = $2`, [id, clientIdOf(req)])
    if (!rows[0]) throw new AppError('ERR_NOT_FOUND', { detail: `no authorization ${id}` })
    return { status: 200, body: authorizationBody(rows[0]) }
  }, saturated))
}
