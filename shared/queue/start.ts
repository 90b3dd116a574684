// Start a claimed job: fetched -> processing, one more attempt, first heartbeat.
// Guarded by the lease: a job rescued from this worker meanwhile is not started.
import type { Db } from './types.ts'

export async function start (db: Db, id: string, lease: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `update jobs.jobs_hot set status = 'processing', attempts = attempts + 1, started_at = clock_timestamp(), heartbeat_at = clock_timestamp()
      where id = $1 and lease = $2 and status = 'fetched'`, [id, lease])
  return rowCount === 1
}
