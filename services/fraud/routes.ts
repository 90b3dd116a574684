// Fraud screening. With a permit: score now (200, mode "sync") in one short
// transaction. With permits and queue full: store the screening as queued with
// its fraud-async job, outside any permit, through the lane's group-commit
// writer (overflow.ts), and answer 202 (mode "async") with a Location to poll;
// the worker scores it with the same engine.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type pg from 'pg'
import { IdParams, ScreeningRequest } from '../../shared/api-schemas.ts'
import { newId } from '../../shared/ids.ts'
import { AppError } from '../../shared/errors.ts'
import { saturationError } from '../../shared/lanes.ts'
import { fairSaturationError } from '../../shared/lane-kit/fair.ts'
import type { LaneKit } from '../../shared/lane-kit/build-lane-app.ts'
import type { LaneResult } from '../../shared/lane-kit/admission.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import { cardHistory } from './history.ts'
import { score, type ScoringWeights } from './scoring.ts'
import type { ScreeningWriter } from './overflow.ts'
import { annotate, traceCarrier, traceOf } from '../../shared/tracing.ts'

const statusOf = (response: { mode?: string }): number => (response.mode === 'async' ? 202 : 200)

type Row = { fingerprint: string, response: { id: string, mode?: string } }

const SEEN = 'select fingerprint, response from fraud.screenings where client_id = $1 and idempotency_key = $2'
// A retry that arrives while the first attempt's transaction runs is told so at
// once (409 ERR_IDEMPOTENCY_IN_PROGRESS) rather than waiting on its locks with a
// permit and a connection. The lock is held to the end of the transaction.
const FIRST = `select pg_try_advisory_xact_lock(hashtextextended($1 || chr(31) || $2, 727003)) as mine, s.fingerprint, s.response
                 from (select 1) one left join fraud.screenings s on s.client_id = $1 and s.idempotency_key = $2`

export function fraudRoutes (weights: ScoringWeights, writer: ScreeningWriter) {
  return (app: FastifyInstance, kit: LaneKit): void => {
    // 503 ERR_FRAUD_SATURATED with Retry-After and the RateLimit fields of the lane's permits.
    const saturated = (detail: string) => saturationError('fraud', detail, { name: 'fraud', quota: kit.limits.permits })
    const answer = (row: Row, fp: string, fresh: boolean): LaneResult => {
      if (!fresh) return replay({ ...row, status: statusOf(row.response) }, fp)
      return { status: statusOf(row.response), body: row.response, headers: { location: `/v1/fraud/screenings/${row.response.id}` } }
    }
    const insert = (c: pg.PoolClient, req: FastifyRequest, mode: 'sync' | 'async', result: ReturnType<typeof score> | null) => {
      const body = req.body as ScreeningRequest
      const id = newId()
      const response = result ? { id, mode, status: 'final', ...result } : { id, mode, status: 'queued' }
      return c.query(
        `insert into fraud.screenings (id, client_id, idempotency_key, fingerprint, card_token, merchant_id, amount, currency, ip_country, billing_country, mode, status, score, decision, reasons, response, scored_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, case when $12 = 'final' then now() end)
         on conflict (client_id, idempotency_key) do nothing`,
        [id, clientIdOf(req), idempotencyKeyOf(req), fingerprint(body), body.cardToken, body.merchantId,
          body.amount.value, body.amount.currency, body.ipCountry ?? null, body.billingCountry ?? null,
          mode, result ? 'final' : 'queued', result?.score ?? null, result?.decision ?? null,
          result ? JSON.stringify(result.reasons) : null, response])
        .then(r => ({ inserted: r.rowCount === 1, id }))
    }

    // Every permit busy and the queue full: queued through the lane's writer, answered 202 once committed.
    const overflow = async (req: FastifyRequest): Promise<LaneResult> => {
      const body = req.body as ScreeningRequest
      const id = newId()
      const fp = fingerprint(body)
      const trace = traceOf(req)
      let stored
      try {
        stored = await writer.submit({
          id,
          clientId: clientIdOf(req),
          key: idempotencyKeyOf(req),
          fingerprint: fp,
          cardToken: body.cardToken,
          merchantId: body.merchantId,
          amount: body.amount.value,
          currency: body.amount.currency,
          ipCountry: body.ipCountry ?? null,
          billingCountry: body.billingCountry ?? null,
          response: { id, mode: 'async', status: 'queued' },
          trace: traceCarrier(trace) ?? null,
        }, undefined, trace)
      } catch (err) {
        throw saturated(`fraud lane saturated and the screening could not be queued (${(err as Error).message})`)
      }
      annotate(req, { 'watertight.fraud.mode': 'async' })
      return { ...answer(stored, fp, stored.inserted), outcome: 'overflowed' }
    }

    app.post('/v1/fraud/screenings', { schema: { body: ScreeningRequest } }, kit.admitted(async (req: FastifyRequest, exec) => {
      const body = req.body as ScreeningRequest
      const fp = fingerprint(body)
      return exec.db.tx(async c => {
        // One screening per (client, key) at a time, and the earlier answer if there is one, in one round trip.
        const seen = await c.query<Partial<Row> & { mine: boolean }>(FIRST, [clientIdOf(req), idempotencyKeyOf(req)])
        if (!seen.rows[0]!.mine) throw new AppError('ERR_IDEMPOTENCY_IN_PROGRESS', { detail: 'a screening with this Idempotency-Key is still being processed; retry after a second to get its answer' })
        if (seen.rows[0]!.response) return answer(seen.rows[0] as Row, fp, false)
        const h = await cardHistory(c, body.cardToken, weights, null)
        const result = score({
          amount: body.amount.value, ipCountry: body.ipCountry, billingCountry: body.billingCountry, ...h,
        }, weights)
        const { inserted } = await insert(c, req, 'sync', result)
        const row = (await c.query<Row>(SEEN, [clientIdOf(req), idempotencyKeyOf(req)])).rows[0]!
        return answer(row, fp, inserted)
      })
    }, (_reason, req) => overflow(req)))

    // The current state: a queued async screening shows its result once the worker scored it.
    app.get('/v1/fraud/screenings/:id', { schema: { params: IdParams } }, kit.admitted(async (req: FastifyRequest, exec) => {
      const { id } = req.params as { id: string }
      const { rows } = await exec.db.query<{
        response: Record<string, unknown>
        status: string
        score: number | null
        decision: string | null
        reasons: unknown
      }>(
        'select response, status, score, decision, reasons from fraud.screenings where id = $1 and client_id = $2', [id, clientIdOf(req)])
      const r = rows[0]
      if (!r) throw new AppError('ERR_NOT_FOUND', { detail: `no screening ${id}` })
      return { status: 200, body: r.status === 'final' ? { ...r.response, status: 'final', score: r.score, decision: r.decision, reasons: r.reasons } : r.response }
    }, (_reason, _req, fair) => { throw fairSaturationError(kit.limits, 'fraud lane saturated: every permit busy and the queue full', fair) }))
  }
}
