// Move jobs from jobs_hot to jobs_dead, with a reason and the last error.
import type { Db } from './types.ts'

/** Move the jobs matching `where` (over jobs_hot) to jobs_dead; returns the queue of each. */
export async function toDead (db: Db, where: string, params: unknown[], reason: 'max_attempts' | 'zombie' | 'fatal', error: string | null): Promise<string[]> {
  const n = params.length
  const { rows } = await db.query<{ queue: string }>(
    `with gone as (delete from jobs.jobs_hot where ${where} returning *)
     insert into jobs.jobs_dead (id, queue, type, payload, priority, attempts, max_attempts, idempotency_key, reason, last_error, created_at)
     select id, queue, type, payload, priority, attempts, max_attempts, idempotency_key, $${n + 1}, coalesce($${n + 2}, last_error), created_at from gone
     returning queue`,
    [...params, reason, error])
  return rows.map(r => r.queue)
}
