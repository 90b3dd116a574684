// Complete a job: it leaves jobs_hot for jobs_archive, only while this worker
// still holds its lease. The worker completes many at once in its fetch cycle
// (claim.ts: fetchJobs' `done`).
import type { Db } from './types.ts'

export async function complete (db: Db, id: string, lease: string, result: unknown = null): Promise<boolean> {
  const { rowCount } = await db.query(
    `with done as (
       delete from jobs.jobs_hot where id = $1 and lease = $2 and status = 'processing' returning *)
     insert into jobs.jobs_archive (id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, finished_at, result)
     select id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, clock_timestamp(), $3 from done`,
    [id, lease, result === undefined ? null : JSON.stringify(result)])
  return rowCount === 1
}
