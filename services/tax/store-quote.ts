// Store a tax quote and answer it. A compensated quote is stored together with
// its tax-reconcile job in one transaction: no compensated quote without its
// reconciliation, no job without its quote.
import crypto from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import type pg from 'pg'
import type { TaxQuoteRequest } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import type { LaneResult } from '../../shared/lane-kit/admission.ts'
import type { Execution } from '../../shared/lane-kit/execution.ts'
import { connectWithin } from '../../shared/db/pool.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'

export type QuoteSource = { source: 'provider', rate: number } | { source: 'compensation', rate: number, tableVersion: string, reason: string }

// Outside a permit (the saturated path) the lane waits this long at most for a connection.
// (250 ms: on a loaded 2-core machine a burst of 50 overflows at once needed more than 100.)
const CONNECT_BUDGET_MS = 250

export async function storeQuote (pool: pg.Pool, req: FastifyRequest, q: QuoteSource, exec?: Execution): Promise<LaneResult> {
  const client = clientIdOf(req)
  const key = idempotencyKeyOf(req)
  const body = req.body as TaxQuoteRequest
  const fp = fingerprint(body)
  const id = crypto.randomUUID()
  const tax = Math.round(body.amount.value * q.rate)
  const response = {
    id, jurisdiction: body.jurisdiction, rate: q.rate,
    tax: { value: tax, currency: body.amount.currency },
    total: { value: body.amount.value + tax, currency: body.amount.currency },
    amount: body.amount, source: q.source,
    ...(q.source === 'compensation' ? { tableVersion: q.tableVersion } : {}),
  }
  const run = async (c: pg.PoolClient | pg.Pool): Promise<{ fingerprint: string, response: unknown, inserted: boolean }> => {
    const ins = await c.query<{ fingerprint: string, response: unknown, inserted: boolean }>(
      `insert into tax.quotes as q (id, client_id, idempotency_key, fingerprint, jurisdiction, amount, currency, rate, tax, total, source, table_version, response)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
       on conflict (client_id, idempotency_key) do update set id = q.id
       returning q.fingerprint, q.response, (q.id = $1) as inserted`,
      [id, client, key, fp, body.jurisdiction, body.amount.value, body.amount.currency, q.rate, tax, body.amount.value + tax, q.source, q.source === 'compensation' ? q.tableVersion : null, response])
    const row = ins.rows[0]!
    if (row.inserted && q.source === 'compensation') {
      await c.query("select jobs.enqueue('tax-reconcile', 'tax.reconcile', $1, 0, 0, 20, $2)", [{ quoteId: id, reason: q.reason }, `reconcile:${id}`])
    }
    return row
  }
  let row
  if (exec) {
    row = await exec.db.tx(run)
  } else {
    // The saturated path holds no permit: take a connection only if one comes quickly.
    const c = await connectWithin(pool, CONNECT_BUDGET_MS, () => new AppError('ERR_TAX_BULKHEAD_SATURATED', { detail: 'saturated, and no database connection free to record a compensated quote', headers: { 'retry-after': '5' } }))
    try {
      await c.query('begin')
      row = await run(c)
      await c.query('commit')
    } catch (err) {
      await c.query('rollback').catch(() => {})
      throw err
    } finally { c.release() }
  }
  if (!row.inserted) return replay({ ...row, status: 200 }, fp)
  return { status: 200, body: response, headers: { location: `/v1/tax/quotes/${id}` } }
}
