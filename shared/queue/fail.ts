// Fail a job: retry later with exponential backoff and jitter, or dead-letter
// it when its attempts are used up or the failure is fatal. A deferred job (it
// could not try: its dependency is known down) goes back with its backoff and
// its attempt given back, never dead-lettered. Lease-guarded.
import type { Db } from './types.ts'
import { backoffMs } from '../backoff.ts'
import { toDead } from './dead-letter.ts'

export interface FailOptions {
  fatal?: boolean, deferred?: boolean, baseMs?: number, capMs?: number, random?: () => number
}

/** Retry with backoff, or dead-letter when attempts are used up or the failure is fatal. */
export async function fail (db: Db, id: string, lease: string, error: string, o: FailOptions = {}): Promise<'retry' | 'dead' | 'lost'> {
  const { rows } = await db.query<{ attempts: number, max_attempts: number }>(
    "select attempts, max_attempts from jobs.jobs_hot where id = $1 and lease = $2 and status = 'processing'", [id, lease])
  const job = rows[0]
  if (!job) return 'lost'
  const msg = error.slice(0, 2_000)
  if (!o.deferred && (o.fatal || job.attempts >= job.max_attempts)) {
    const moved = await toDead(db, "id = $1 and lease = $2 and status = 'processing'", [id, lease], o.fatal ? 'fatal' : 'max_attempts', msg)
    return moved.length > 0 ? 'dead' : 'lost'
  }
  // Unless the worker sets its own: 1 s after the first failure, doubling, at most 5 min.
  const delay = Math.round(backoffMs(job.attempts, { baseMs: o.baseMs ?? 1_000, capMs: o.capMs ?? 5 * 60_000, jitter: 'equal', random: o.random }))
  const { rowCount } = await db.query(
    `update jobs.jobs_hot set status = 'pending', lease = null, attempts = attempts - $5::int, worker_id = null, fetched_at = null, started_at = null, heartbeat_at = null,
            scheduled_at = clock_timestamp() + make_interval(secs => $3::double precision / 1000), last_error = $4
      where id = $1 and lease = $2 and status = 'processing'`, [id, lease, delay, msg, o.deferred ? 1 : 0])
  return rowCount === 1 ? 'retry' : 'lost'
}
