// Zombie rescue. Guarded by state, lease and row locks so it can never
// overwrite a job that finished meanwhile: each statement re-checks status and
// age on the locked row, and rows being completed right now are skipped.
//  - fetched but never started for longer than the queue's zombie timeout: the
//    worker died between claim and start; back to pending (nothing ran);
//  - processing with a heartbeat older than the queue's zombie timeout: re-run
//    (back to pending) only when the job type is declared idempotent, else
//    jobs_dead with reason 'zombie' — it may have run partly, and running it
//    twice could do harm.
import type { Db } from './types.ts'
import { toDead } from './dead-letter.ts'

export interface RescueResult { requeuedFetched: number, requeuedProcessing: number, dead: number, byQueue: Record<string, number> }

const STALE = (status: string, column: string) => `id in (
  select h.id from jobs.jobs_hot h join jobs.queues q on q.name = h.queue
   where h.status = '${status}' and h.${column} < clock_timestamp() - make_interval(secs => q.zombie_timeout_seconds)`

export async function rescueZombies (db: Db, idempotentTypes: readonly string[]): Promise<RescueResult> {
  const byQueue: Record<string, number> = {}
  const count = (rows: Array<{ queue: string }>): number => { for (const r of rows) byQueue[r.queue] = (byQueue[r.queue] ?? 0) + 1; return rows.length }
  const back = `set status = 'pending', lease = null, worker_id = null, fetched_at = null, started_at = null, heartbeat_at = null, last_error = coalesce(last_error, '') || $1`
  const f = await db.query<{ queue: string }>(
    `update jobs.jobs_hot ${back} where ${STALE('fetched', 'fetched_at')} for update of h skip locked) and status = 'fetched' returning queue`,
    ['[rescued: fetched, never started]'])
  const p = await db.query<{ queue: string }>(
    `update jobs.jobs_hot ${back} where ${STALE('processing', 'heartbeat_at')} and h.type = any($2::text[]) for update of h skip locked) and status = 'processing' returning queue`,
    ['[rescued: zombie, idempotent re-run]', idempotentTypes])
  const dead = await toDead(db, `${STALE('processing', 'heartbeat_at')} and not (h.type = any($1::text[])) for update of h skip locked) and status = 'processing'`, [idempotentTypes], 'zombie', 'worker lost (heartbeat stopped) while running a non-idempotent job')
  return { requeuedFetched: count(f.rows), requeuedProcessing: count(p.rows), dead: count(dead.map(queue => ({ queue }))), byQueue }
}
