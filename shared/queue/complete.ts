// Complete jobs: they leave jobs_hot for jobs_archive, only while this worker
// still holds their lease. One job per statement (complete), or many in one
// (completeMany, the same statement the worker's fetch cycle runs ahead of its
// claim: jobs.fetch with no slots).
import type { Db } from './types.ts'
import { fetchJobs, type Done } from './claim.ts'

export async function complete (db: Db, id: string, lease: string, result: unknown = null): Promise<boolean> {
  const { rowCount } = await db.query(
    `with done as (
       delete from jobs.jobs_hot where id = $1 and lease = $2 and status = 'processing' returning *)
     insert into jobs.jobs_archive (id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, finished_at, result)
     select id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, clock_timestamp(), $3 from done`,
    [id, lease, result === undefined ? null : JSON.stringify(result)])
  return rowCount === 1
}

/** Complete many jobs in one statement; returns the ids that were archived (the others had lost their lease). */
export async function completeMany (db: Db, workerId: string, done: readonly Done[]): Promise<Set<string>> {
  return (await fetchJobs(db, { workerId, slots: {}, done })).completed
}
