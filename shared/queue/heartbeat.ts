// Heartbeat the jobs a worker is running, in one statement. Guarded by lease and
// status: a rescued job's old worker cannot keep it looking alive.
//
// It never waits for a row lock: a row locked now is being completed by this
// worker's own fetch (jobs.fetch archives it) or judged by a rescue, and either
// decides its fate without the heartbeat. Waiting instead deadlocked with the
// worker's own fetch cycle (each locking the other's next row: seen in
// `npm run bench -- queue` at MaxWorkers 10), and the heartbeat failed.
import type { Db } from './types.ts'

export async function heartbeat (db: Db, ids: Array<{ id: string, lease: string }>): Promise<number> {
  if (ids.length === 0) return 0
  const { rowCount } = await db.query(
    `update jobs.jobs_hot h set heartbeat_at = clock_timestamp()
      where h.id in (
        select c.id from jobs.jobs_hot c join unnest($1::bigint[], $2::uuid[]) as x(id, lease) on c.id = x.id and c.lease = x.lease
         where c.status = 'processing'
           for no key update of c skip locked)`, [ids.map(i => i.id), ids.map(i => i.lease)])
  return rowCount ?? 0
}
