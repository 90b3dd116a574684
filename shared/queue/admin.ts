// Queue controls for the admin API. Each takes effect on the next fetch cycle
// of every worker: the claim re-reads the queue row under its lock. Changes
// also NOTIFY so idle workers look at once.
import type pg from 'pg'
import { rollback, withTransaction } from '../db/transaction.ts'
import type { Db, QueueRow } from './types.ts'

export interface QueuePatch {
  maxWorkers?: number | null, paused?: boolean, active?: boolean, zombieTimeoutSeconds?: number
}

/**
 * Apply a patch; deactivating also releases fetched-but-not-started jobs back
 * to pending. Returns the new row, or undefined for an unknown queue.
 */
export async function updateQueue (pool: pg.Pool, name: string, patch: QueuePatch): Promise<QueueRow | undefined> {
  return withTransaction(pool, async c => {
    const { rows } = await c.query<QueueRow>(
      `update jobs.queues set
         max_workers = case when $2 then $3::int else max_workers end,
         paused = coalesce($4, paused),
         active = coalesce($5, active),
         zombie_timeout_seconds = coalesce($6, zombie_timeout_seconds),
         updated_at = now()
       where name = $1 returning *`,
      [name, patch.maxWorkers !== undefined, patch.maxWorkers ?? null,
        patch.paused ?? null, patch.active ?? null, patch.zombieTimeoutSeconds ?? null])
    if (!rows[0]) return rollback(undefined)
    if (patch.active === false) {
      await c.query(`update jobs.jobs_hot set status = 'pending', lease = null, worker_id = null, fetched_at = null
                      where queue = $1 and status = 'fetched'`, [name])
    }
    await c.query("select pg_notify('jobs_control', $1)", [name])
    return rows[0]
  })
}

export interface QueueStats {
  name: string
  maxWorkers: number | null
  paused: boolean
  active: boolean
  zombieTimeoutSeconds: number
  jobs: { pending: number, fetched: number, processing: number, dead: number }
  oldestPendingAgeSeconds: number
}

export async function queueStats (db: Db): Promise<QueueStats[]> {
  const { rows } = await db.query<QueueRow & {
    pending: number, fetched: number, processing: number, dead: number, oldest: number | null
  }>(
    `select q.*,
            (select count(*)::int from jobs.jobs_hot h where h.queue = q.name and h.status = 'pending') as pending,
            (select count(*)::int from jobs.jobs_hot h where h.queue = q.name and h.status = 'fetched') as fetched,
            (select count(*)::int from jobs.jobs_hot h where h.queue = q.name and h.status = 'processing') as processing,
            (select count(*)::int from jobs.jobs_dead d where d.queue = q.name) as dead,
            (select extract(epoch from now() - min(h.scheduled_at))::float8 from jobs.jobs_hot h where h.queue = q.name and h.status = 'pending' and h.scheduled_at <= now()) as oldest
       from jobs.queues q order by q.name`)
  return rows.map(r => ({
    name: r.name,
    maxWorkers: r.max_workers,
    paused: r.paused,
    active: r.active,
    zombieTimeoutSeconds: r.zombie_timeout_seconds,
    jobs: { pending: r.pending, fetched: r.fetched, processing: r.processing, dead: r.dead },
    oldestPendingAgeSeconds: Math.max(0, r.oldest ?? 0),
  }))
}

export interface DeadJob {
  id: string, type: string, reason: string, attempts: number, lastError: string | null, diedAt: string
}

export async function listDead (db: Db, queue: string, limit = 100): Promise<DeadJob[]> {
  const { rows } = await db.query<{
    id: string, type: string, reason: string, attempts: number, last_error: string | null, died_at: Date
  }>(
    'select id, type, reason, attempts, last_error, died_at from jobs.jobs_dead where queue = $1 order by died_at desc limit $2', [queue, limit])
  return rows.map(r => ({
    id: r.id,
    type: r.type,
    reason: r.reason,
    attempts: r.attempts,
    lastError: r.last_error,
    diedAt: r.died_at.toISOString(),
  }))
}

/** Move dead jobs (all of the queue's, or the given ids) back to pending with fresh attempts. */
export async function requeueDead (db: Db, queue: string, ids?: string[]): Promise<number> {
  const { rowCount } = await db.query(
    `with back as (delete from jobs.jobs_dead where queue = $1 and ($2::bigint[] is null or id = any($2::bigint[])) returning *)
     insert into jobs.jobs_hot (id, queue, type, payload, status, priority, max_attempts, idempotency_key, created_at)
       overriding system value
     select id, queue, type, payload, 'pending', priority, max_attempts, idempotency_key, created_at from back`,
    [queue, ids ?? null])
  if (rowCount) await db.query("select pg_notify('jobs_enqueued', $1)", [queue])
  return rowCount ?? 0
}
