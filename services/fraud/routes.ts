// Fraud screening. Sync scoring reads the card's recent history from the fraud
// schema and stores the screening with its result in one transaction.
import crypto from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ScreeningRequest } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import type { LaneKit } from '../../shared/lane-kit/build-lane-app.ts'
import { storedResponseRoute } from '../../shared/lane-kit/stored-response.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import { DEFAULT_WEIGHTS, score } from './scoring.ts'

// Until the fraud-async queue exists (issue 7) an overflow is refused, not
// silently parked: a screening nobody will ever score is worse than a 503.
function saturated (): never {
  throw new AppError('ERR_FRAUD_SATURATED', { extensions: { 'violated-policies': ['fraud'] }, headers: { 'ratelimit-policy': '"fraud";q=30;w=1', ratelimit: '"fraud";r=0;t=5' } })
}

export function fraudRoutes (app: FastifyInstance, kit: LaneKit): void {
  app.post('/v1/fraud/screenings', { schema: { body: ScreeningRequest } }, kit.admitted(async (req: FastifyRequest, exec) => {
    const client = clientIdOf(req)
    const key = idempotencyKeyOf(req)
    const body = req.body as ScreeningRequest
    const fp = fingerprint(body)
    return exec.db.tx(async c => {
      const seen = await c.query<{ fingerprint: string, response: unknown }>('select fingerprint, response from fraud.screenings where client_id = $1 and idempotency_key = $2', [client, key])
      if (seen.rows[0]) return replay({ ...seen.rows[0], status: 200 }, fp)
      const w = DEFAULT_WEIGHTS
      const h = await c.query<{ recent: string, n: string, avg: string | null }>(
        `select count(*) filter (where created_at > now() - make_interval(mins => $2)) as recent, count(*) as n, avg(amount) as avg
           from fraud.screenings where card_token = $1`, [body.cardToken, w.velocityWindowMinutes])
      const hist = h.rows[0]!
      const result = score({
        amount: body.amount.value, ipCountry: body.ipCountry, billingCountry: body.billingCountry,
        recentCount: Number(hist.recent), historyCount: Number(hist.n), historyAvgAmount: Number(hist.avg ?? 0),
      }, w)
      const id = crypto.randomUUID()
      const response = { id, mode: 'sync', status: 'final', ...result }
      const ins = await c.query(
        `insert into fraud.screenings (id, client_id, idempotency_key, fingerprint, card_token, merchant_id, amount, currency, ip_country, billing_country, mode, status, score, decision, reasons, response, scored_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'sync', 'final', $11, $12, $13, $14, now())
         on conflict (client_id, idempotency_key) do nothing`,
        [id, client, key, fp, body.cardToken, body.merchantId, body.amount.value, body.amount.currency, body.ipCountry ?? null, body.billingCountry ?? null, result.score, result.decision, JSON.stringify(result.reasons), response])
      if (ins.rowCount === 0) {
        const again = await c.query<{ fingerprint: string, response: unknown }>('select fingerprint, response from fraud.screenings where client_id = $1 and idempotency_key = $2', [client, key])
        return replay({ ...again.rows[0]!, status: 200 }, fp)
      }
      return { status: 200, body: response, headers: { location: `/v1/fraud/screenings/${id}` } }
    })
  }, saturated))

  storedResponseRoute(app, kit, { url: '/v1/fraud/screenings/:id', table: 'fraud.screenings', what: 'screening', onReject: saturated })
}
