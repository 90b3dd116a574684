// A claimed job's life: start (fetched -> processing), heartbeat, complete
// (-> jobs_archive), fail (-> pending with backoff, or jobs_dead). Every
// statement is guarded by the job's lease, so a worker whose job was rescued
// meanwhile changes nothing.
import type pg from 'pg'
import type { Db } from './types.ts'
import { backoffMs } from './backoff.ts'

export async function start (db: Db, id: string, lease: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `update jobs.jobs_hot set status = 'processing', attempts = attempts + 1, started_at = clock_timestamp(), heartbeat_at = clock_timestamp()
      where id = $1 and lease = $2 and status = 'fetched'`, [id, lease])
  return rowCount === 1
}

export async function heartbeat (db: Db, ids: Array<{ id: string, lease: string }>): Promise<number> {
  if (ids.length === 0) return 0
  const { rowCount } = await db.query(
    `update jobs.jobs_hot h set heartbeat_at = clock_timestamp()
       from unnest($1::bigint[], $2::uuid[]) as x(id, lease)
      where h.id = x.id and h.lease = x.lease and h.status = 'processing'`, [ids.map(i => i.id), ids.map(i => i.lease)])
  return rowCount ?? 0
}

export async function complete (db: Db, id: string, lease: string, result: unknown = null): Promise<boolean> {
  const { rowCount } = await db.query(
    `with done as (
       delete from jobs.jobs_hot where id = $1 and lease = $2 and status = 'processing' returning *)
     insert into jobs.jobs_archive (id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, finished_at, result)
     select id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, clock_timestamp(), $3 from done`,
    [id, lease, result === undefined ? null : JSON.stringify(result)])
  return rowCount === 1
}

export interface FailOptions { fatal?: boolean, baseMs?: number, capMs?: number, random?: () => number }

/** Retry with backoff, or dead-letter when attempts are used up or the failure is fatal. */
export async function fail (db: Db, id: string, lease: string, error: string, o: FailOptions = {}): Promise<'retry' | 'dead' | 'lost'> {
  const { rows } = await db.query<{ attempts: number, max_attempts: number }>(
    "select attempts, max_attempts from jobs.jobs_hot where id = $1 and lease = $2 and status = 'processing'", [id, lease])
  const job = rows[0]
  if (!job) return 'lost'
  const msg = error.slice(0, 2_000)
  if (o.fatal || job.attempts >= job.max_attempts) {
    const moved = await toDead(db, `id = $1 and lease = $2 and status = 'processing'`, [id, lease], o.fatal ? 'fatal' : 'max_attempts', msg)
    return moved.length > 0 ? 'dead' : 'lost'
  }
  const delay = backoffMs(job.attempts, o)
  const { rowCount } = await db.query(
    `update jobs.jobs_hot set status = 'pending', lease = null, worker_id = null, fetched_at = null, started_at = null, heartbeat_at = null,
            scheduled_at = clock_timestamp() + make_interval(secs => $3::double precision / 1000), last_error = $4
      where id = $1 and lease = $2 and status = 'processing'`, [id, lease, delay, msg])
  return rowCount === 1 ? 'retry' : 'lost'
}

/** Move the jobs matching `where` (over jobs_hot) to jobs_dead; returns the queue of each. */
export async function toDead (db: Db | pg.PoolClient, where: string, params: unknown[], reason: 'max_attempts' | 'zombie' | 'fatal', error: string | null): Promise<string[]> {
  const n = params.length
  const { rows } = await db.query<{ queue: string }>(
    `with gone as (delete from jobs.jobs_hot where ${where} returning *)
     insert into jobs.jobs_dead (id, queue, type, payload, priority, attempts, max_attempts, idempotency_key, reason, last_error, created_at)
     select id, queue, type, payload, priority, attempts, max_attempts, idempotency_key, $${n + 1}, coalesce($${n + 2}, last_error), created_at from gone
     returning queue`,
    [...params, reason, error])
  return rows.map(r => r.queue)
}
