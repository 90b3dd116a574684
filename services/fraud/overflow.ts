// The fraud lane's overflow: with every permit busy and the queue full, the
// screening is stored as queued with its fraud-async job and answered 202. The
// lane's group-commit writer (shared/db/group-commit.ts) writes the screenings of
// a burst together, on a connection reserved for it, and each is answered once
// its batch is committed: never a wait for one of the lane's pool connections.
import type pg from 'pg'
import { GroupCommit, withReplays } from '../../shared/db/group-commit.ts'
import { JOB_NAMES, QUEUES } from '../../shared/queue/job-types.ts'
import type { TraceCarrier } from '../../shared/tracing.ts'

export interface QueuedScreening {
  id: string
  clientId: string
  key: string
  fingerprint: string
  cardToken: string
  merchantId: string
  amount: number
  currency: string
  ipCountry: string | null
  billingCountry: string | null
  response: { id: string, mode: 'async', status: 'queued' }
  /** The request's W3C trace context, for its job's span (null when not traced). */
  trace?: TraceCarrier | null
}

export interface StoredScreening { fingerprint: string, response: { id: string, mode?: string }, inserted: boolean }

// The batch's screenings and, for those that were new, their jobs
// (jobs.enqueue_many: one NOTIFY for the lot), in one statement; then the
// earlier screening of every key that was taken (a replay), committed by then.
// A job is queued only with a screening the statement inserted, whose key is
// unique: one job per screening without an enqueue key (which would keep a row
// in jobs.enqueue_keys for good for every queued screening).
const WRITE_BATCH = `
  with input as (
    select * from unnest($1::int[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[], $11::text[], $12::jsonb[], $13::jsonb[])
      as t(ord, id, client_id, idempotency_key, fingerprint, card_token, merchant_id, amount, currency, ip_country, billing_country, response, trace)
  ), ins as (
    insert into fraud.screenings (id, client_id, idempotency_key, fingerprint, card_token, merchant_id, amount, currency, ip_country, billing_country, mode, status, response)
    select id, client_id, idempotency_key, fingerprint, card_token, merchant_id, amount, currency, ip_country, billing_country, 'async', 'queued', response
      from input order by ord
    on conflict (client_id, idempotency_key) do nothing
    returning id
  ), jobs as (
    select count(*) as n from jobs.enqueue_many('${QUEUES.fraudAsync}', '${JOB_NAMES.fraudScore}',
      array(select jsonb_build_object('screeningId', i.id) || coalesce(i.trace, '{}')
              from input i join ins using (id) order by i.ord),
      null, 0, 0, 10)
  )
  select i.ord, ins.id is not null as inserted from input i left join ins using (id) cross join jobs order by i.ord`

const TAKEN = `select client_id, idempotency_key, fingerprint, response from fraud.screenings
                where (client_id, idempotency_key) in (select * from unnest($1::text[], $2::text[]))`

export type ScreeningWriter = GroupCommit<QueuedScreening, StoredScreening>

export function screeningWriter (
  databaseUrl: string, log: { warn (o: object, m: string): void }, delayMs = 0
): ScreeningWriter {
  return new GroupCommit<QueuedScreening, StoredScreening>({
    name: 'fraud-overflow-writer',
    applicationName: 'watertight-fraud',
    databaseUrl,
    log,
    delayMs,
    async write (c: pg.Client, ss: readonly QueuedScreening[]) {
      const col = <K extends keyof QueuedScreening>(k: K) => ss.map(s => s[k])
      const { rows } = await c.query<{ ord: number, inserted: boolean }>({ name: 'fraud-write-batch', text: WRITE_BATCH }, [
        ss.map((_s, i) => i), col('id'), col('clientId'), col('key'), col('fingerprint'), col('cardToken'), col('merchantId'), col('amount'), col('currency'),
        col('ipCountry'), col('billingCountry'), ss.map(s => JSON.stringify(s.response)), ss.map(s => s.trace ? JSON.stringify(s.trace) : null)])
      return withReplays<StoredScreening['response']>(c, ss, rows.map(r => r.inserted), TAKEN)
    },
  })
}
