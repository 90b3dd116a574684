// Store a tax quote and answer it. A compensated quote is stored together with
// its tax-reconcile job by one statement: no compensated quote without its
// reconciliation, no job without its quote. Inside a permit the quote is written
// on the lane's pool, under the execution's deadline. A compensation given
// because the lane is saturated holds no permit: it is written by the lane's
// group-commit writer (shared/db/group-commit.ts), batched with the others of
// its burst on a connection reserved for it, and answered once committed.
import type { FastifyRequest } from 'fastify'
import type pg from 'pg'
import type { TaxQuoteRequest } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import { newId } from '../../shared/ids.ts'
import { GroupCommit, withReplays } from '../../shared/db/group-commit.ts'
import type { LaneResult } from '../../shared/lane-kit/admission.ts'
import type { Execution } from '../../shared/lane-kit/execution.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import { JOB_NAMES, QUEUES } from '../../shared/queue/job-types.ts'
import { traceCarrier, traceOf, type Context, type TraceCarrier } from '../../shared/tracing.ts'

export type QuoteSource = { source: 'provider', rate: number } | { source: 'compensation', rate: number, tableVersion: string, reason: string }

/** One quote, ready to be written: its row and its answer. */
export interface QuoteRecord {
  id: string
  clientId: string
  key: string
  fingerprint: string
  jurisdiction: string
  amount: number
  currency: string
  rate: number
  tax: number
  total: number
  source: QuoteSource['source']
  tableVersion: string | null
  reason: string | null
  response: Record<string, unknown>
  /** The request's W3C trace context, for its reconcile job's span (null when not traced). */
  trace?: TraceCarrier | null
}

interface Stored { fingerprint: string, response: unknown, inserted: boolean }

export function quoteRecord (req: FastifyRequest, q: QuoteSource): QuoteRecord {
  const body = req.body as TaxQuoteRequest
  const id = newId()
  const tax = Math.round(body.amount.value * q.rate)
  const tableVersion = q.source === 'compensation' ? q.tableVersion : null
  return {
    id,
    clientId: clientIdOf(req),
    key: idempotencyKeyOf(req),
    fingerprint: fingerprint(body),
    jurisdiction: body.jurisdiction,
    amount: body.amount.value,
    currency: body.amount.currency,
    rate: q.rate,
    tax,
    total: body.amount.value + tax,
    source: q.source,
    tableVersion,
    reason: q.source === 'compensation' ? q.reason : null,
    // Only a compensated quote queues a job, and only a job needs the request's trace context.
    trace: q.source === 'compensation' ? traceCarrier(traceOf(req)) ?? null : null,
    response: {
      id,
      jurisdiction: body.jurisdiction,
      rate: q.rate,
      tax: { value: tax, currency: body.amount.currency },
      total: { value: body.amount.value + tax, currency: body.amount.currency },
      amount: body.amount,
      source: q.source,
      ...(tableVersion ? { tableVersion } : {}),
    },
  }
}

function answer (r: QuoteRecord, stored: Stored): LaneResult {
  if (!stored.inserted) return replay({ ...stored, status: 200 }, r.fingerprint)
  return { status: 200, body: r.response, headers: { location: `/v1/tax/quotes/${r.id}` } }
}

// Inside a permit, one statement on the lane's pool, in autocommit: the quote,
// and for a compensated one its reconcile job, atomic and durable when it
// returns; one round trip where a transaction took three (BEGIN, the writes,
// COMMIT: each a wake-up of the lane and of its backend). A key already taken
// returns the earlier quote (`inserted` false) and queues no job.
const QUOTE_COLUMNS = 'id, client_id, idempotency_key, fingerprint, jurisdiction, amount, currency, rate, tax, total, source, table_version, response'
const INSERT_QUOTE = `insert into tax.quotes as q (${QUOTE_COLUMNS})
  values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
  on conflict (client_id, idempotency_key) do update set id = q.id
  returning q.fingerprint, q.response, (q.id = $1) as inserted`
const STORE_QUOTE = { name: 'tax-store-quote', text: INSERT_QUOTE }
// The job CTE is a plain SELECT, evaluated only as far as the outer query reads
// it: the count reads all of it. The job has no enqueue key of its own: it is
// queued only with a quote this statement inserted, and the quote's key is
// unique, so there is one job per quote already. A key would cost a row in
// jobs.enqueue_keys for every compensated quote, kept for good, and a fifth of
// a batch's time in the statement.
const STORE_COMPENSATED = {
  name: 'tax-store-compensated',
  text: `with ins as (${INSERT_QUOTE}),
    job as (select jobs.enqueue('${QUEUES.taxReconcile}', '${JOB_NAMES.taxReconcile}', $14::jsonb, 0, 0, 20) from ins where ins.inserted)
  select ins.fingerprint, ins.response, ins.inserted from ins cross join (select count(*) from job) j`,
}

/** Inside a permit: one statement on the lane's pool, under the execution's deadline. */
export async function storeQuote (exec: Execution, r: QuoteRecord): Promise<LaneResult> {
  const { rows } = r.source === 'compensation'
    ? await exec.db.query<Stored>(STORE_COMPENSATED, compensatedValues(r))
    : await exec.db.query<Stored>(STORE_QUOTE, quoteValues(r))
  return answer(r, rows[0]!)
}

const quoteValues = (r: QuoteRecord): unknown[] => [
  r.id, r.clientId, r.key, r.fingerprint, r.jurisdiction, r.amount, r.currency,
  r.rate, r.tax, r.total, r.source, r.tableVersion, r.response,
]
const compensatedValues = (r: QuoteRecord): unknown[] => [
  ...quoteValues(r), { quoteId: r.id, reason: r.reason, ...r.trace },
]

// One statement writes the batch's quotes and, for those that were new, their
// reconcile jobs (jobs.enqueue_many: one NOTIFY for the lot; no enqueue keys, as
// above), committed when it returns; a second reads back the earlier quote of
// every key that was taken (a replay), a duplicate written earlier in the same
// batch included.
const WRITE_BATCH = `
  with input as (
    select * from unnest($1::int[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::text[],
                         $9::numeric[], $10::bigint[], $11::bigint[], $12::text[], $13::jsonb[], $14::text[], $15::jsonb[])
      as t(ord, id, client_id, idempotency_key, fingerprint, jurisdiction, amount, currency, rate, tax, total, table_version,
           response, reason, trace)
  ), ins as (
    insert into tax.quotes (${QUOTE_COLUMNS})
    select id, client_id, idempotency_key, fingerprint, jurisdiction, amount, currency, rate, tax, total, 'compensation', table_version, response
      from input order by ord
    on conflict (client_id, idempotency_key) do nothing
    returning id
  ), jobs as (
    select count(*) as n from jobs.enqueue_many('${QUEUES.taxReconcile}', '${JOB_NAMES.taxReconcile}',
      array(select jsonb_build_object('quoteId', i.id, 'reason', i.reason) || coalesce(i.trace, '{}')
              from input i join ins using (id) order by i.ord),
      null, 0, 0, 20)
  )
  select i.ord, ins.id is not null as inserted from input i left join ins using (id) cross join jobs order by i.ord`

const TAKEN = `select client_id, idempotency_key, fingerprint, response from tax.quotes
                where (client_id, idempotency_key) in (select * from unnest($1::text[], $2::text[]))`

/** The writer of compensated quotes given while saturated, batched per commit. */
export function compensationWriter (
  databaseUrl: string, log: { warn (o: object, m: string): void }, delayMs = 0
): GroupCommit<QuoteRecord, Stored> {
  return new GroupCommit<QuoteRecord, Stored>({
    name: 'tax-compensation-writer',
    applicationName: 'watertight-tax',
    databaseUrl,
    log,
    delayMs,
    async write (c: pg.Client, rs: readonly QuoteRecord[]) {
      // A batch of one (most of them during a brownout: the next write leaves
      // as soon as the last commit is back) goes as the single quote's
      // statement, which costs the server less than the unnest form.
      if (rs.length === 1) return [(await c.query<Stored>(STORE_COMPENSATED, compensatedValues(rs[0]!))).rows[0]!]
      const col = <K extends keyof QuoteRecord>(k: K) => rs.map(r => r[k])
      const { rows } = await c.query<{ ord: number, inserted: boolean }>({ name: 'tax-write-batch', text: WRITE_BATCH }, [
        rs.map((_r, i) => i), col('id'), col('clientId'), col('key'), col('fingerprint'), col('jurisdiction'), col('amount'), col('currency'),
        col('rate'), col('tax'), col('total'), col('tableVersion'), rs.map(r => JSON.stringify(r.response)), col('reason'),
        rs.map(r => r.trace ? JSON.stringify(r.trace) : null)])
      return withReplays<unknown>(c, rs, rows.map(r => r.inserted), TAKEN)
    },
  })
}

/** Outside a permit: through the writer; refused (503, Retry-After: 5) when it cannot take the write. */
export async function storeShedQuote (
  writer: GroupCommit<QuoteRecord, Stored>, r: QuoteRecord, trace?: Context
): Promise<LaneResult> {
  let stored: Stored
  try {
    stored = await writer.submit(r, undefined, trace)
  } catch (err) {
    throw new AppError('ERR_TAX_BULKHEAD_SATURATED', { detail: `saturated, and the compensated quote could not be recorded (${(err as Error).message})`, headers: { 'retry-after': '5' }, cause: err })
  }
  return answer(r, stored)
}
