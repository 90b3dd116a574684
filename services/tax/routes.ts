// Tax quotes. The provider call happens outside any transaction; the quote is
// stored afterwards in one short INSERT, so a slow provider holds no connection.
import crypto from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Pool } from 'undici'
import { TaxQuoteRequest } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import type { LaneKit } from '../../shared/lane-kit/build-lane-app.ts'
import { storedResponseRoute } from '../../shared/lane-kit/stored-response.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import { ProviderError, providerFailure, quoteFromProvider } from './provider.ts'

export interface TaxRouteOptions { provider: Pool, quoteDeadlineMs: number }

function saturated (): never {
  throw new AppError('ERR_TAX_BULKHEAD_SATURATED', {
    detail: 'all tax permits are busy (the tax lane never queues)',
    headers: { 'retry-after': '5', 'ratelimit-policy': '"tax";q=15;w=1', ratelimit: '"tax";r=0;t=5' },
    extensions: { 'violated-policies': ['tax'] },
  })
}

export function taxRoutes (opts: TaxRouteOptions) {
  return (app: FastifyInstance, kit: LaneKit): void => {
    app.post('/v1/tax/quotes', { schema: { body: TaxQuoteRequest } }, kit.admitted(async (req: FastifyRequest, exec) => {
      const client = clientIdOf(req)
      const key = idempotencyKeyOf(req)
      const body = req.body as TaxQuoteRequest
      const fp = fingerprint(body)
      const seen = await exec.db.query<{ fingerprint: string, response: unknown }>('select fingerprint, response from tax.quotes where client_id = $1 and idempotency_key = $2', [client, key])
      if (seen.rows[0]) return replay({ ...seen.rows[0], status: 200 }, fp)

      let quote
      try {
        quote = await quoteFromProvider(opts.provider, body, { deadlineMs: opts.quoteDeadlineMs, signal: exec.signal })
      } catch (err) {
        if (err instanceof ProviderError) throw providerFailure(err)
        throw err
      }
      const id = crypto.randomUUID()
      const tax = Math.round(body.amount.value * quote.rate)
      const response = {
        id, jurisdiction: body.jurisdiction, rate: quote.rate,
        tax: { value: tax, currency: body.amount.currency },
        total: { value: body.amount.value + tax, currency: body.amount.currency },
        amount: body.amount, source: 'provider',
      }
      const ins = await exec.db.query<{ fingerprint: string, response: unknown, inserted: boolean }>(
        `insert into tax.quotes as q (id, client_id, idempotency_key, fingerprint, jurisdiction, amount, currency, rate, tax, total, source, response)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'provider', $11)
         on conflict (client_id, idempotency_key) do update set id = q.id
         returning q.fingerprint, q.response, (q.id = $1) as inserted`,
        [id, client, key, fp, body.jurisdiction, body.amount.value, body.amount.currency, quote.rate, tax, body.amount.value + tax, response])
      const row = ins.rows[0]!
      if (!row.inserted) return replay({ ...row, status: 200 }, fp)
      return { status: 200, body: response, headers: { location: `/v1/tax/quotes/${id}` } }
    }, saturated))

    storedResponseRoute(app, kit, { url: '/v1/tax/quotes/:id', table: 'tax.quotes', what: 'tax quote', onReject: saturated })
  }
}
