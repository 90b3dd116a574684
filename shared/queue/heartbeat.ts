// Heartbeat the jobs a worker is running, in one statement. Guarded by lease and
// status: a rescued job's old worker cannot keep it looking alive.
import type { Db } from './types.ts'

export async function heartbeat (db: Db, ids: Array<{ id: string, lease: string }>): Promise<number> {
  if (ids.length === 0) return 0
  const { rowCount } = await db.query(
    `update jobs.jobs_hot h set heartbeat_at = clock_timestamp()
       from unnest($1::bigint[], $2::uuid[]) as x(id, lease)
      where h.id = x.id and h.lease = x.lease and h.status = 'processing'`, [ids.map(i => i.id), ids.map(i => i.lease)])
  return rowCount ?? 0
}
