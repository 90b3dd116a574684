// Zombie rescue (DESIGN §5). Guarded by state, worker, lease and row locks so it
// can never overwrite a job that finished or moved on meanwhile: each statement
// locks the stale rows it judged (skipping rows someone is completing right now)
// and touches a row only while its status, worker and lease are still the ones
// it judged.
//  - fetched but never started for longer than the queue's zombie timeout: the
//    worker died between claim and start; back to pending. Nothing ran, so no
//    job type is judged and any worker may do it, in any queue.
//  - processing with a heartbeat older than the queue's zombie timeout: re-run
//    (back to pending; start makes it attempt+1) when its type is declared
//    idempotent, else jobs_dead with reason 'zombie' — it may have run partly,
//    and running it twice could do harm.
//
// Who judges a processing zombie. Only a worker that serves its queue AND knows
// its type, so the judgement is the type's own declaration. Each worker process
// loads the job types of the lanes owning its queues, so worker-fraud does not
// know `tax.reconcile`; when every worker judged every queue by its own list,
// worker-fraud dead-lettered idempotent `tax.reconcile` zombies as if they were
// not idempotent (and worker-tax did the same to `fraud.score`).
// Considered instead: storing `idempotent` on the job row at enqueue. It lets
// any worker judge any zombie, but the enqueuer (a lane, through jobs.enqueue)
// would have to restate what the job type declares — two sources that can drift
// — and it needs a migration and a new enqueue signature. Scoping needs neither.
//
// A processing zombie nobody here can judge (its queue is served by no running
// worker, or no running worker has its type: a lane's worker is down, or a type
// was removed by a deploy) stays in jobs_hot, untouched, for a worker that
// knows it: when that worker starts, it rescues it by its rule. Meanwhile it is
// not silent: strandedZombies() lists processing jobs stale for more than twice
// their queue's zombie timeout — a full timeout past the point any live worker
// knowing them would have rescued them — and every worker reports that list as
// the gauge `queue_zombies_stranded{queue,type}` and a warning in its log.
// Dead-lettering them instead would be the same guess this file exists to stop.
import type { Db } from './types.ts'
import { toDead } from './dead-letter.ts'

export interface RescueScope {
  /** The queues this worker serves. */
  queues: readonly string[]
  /** The job types this worker knows, with their declared idempotency. */
  types: ReadonlyArray<{ type: string, idempotent: boolean }>
}

export interface RescueResult {
  requeuedFetched: number, requeuedProcessing: number, dead: number, byQueue: Record<string, number>
}

export interface StrandedZombies { queue: string, type: string, jobs: number, oldestHeartbeatAgeSeconds: number }

// Stale rows of one status, locked; `scope` narrows them with more conditions on h.
const STALE = (status: 'fetched' | 'processing', scope = '') => {
  const column = status === 'fetched' ? 'fetched_at' : 'heartbeat_at'
  return `status = '${status}' and (id, worker_id, lease) in (
  select h.id, h.worker_id, h.lease from jobs.jobs_hot h join jobs.queues q on q.name = h.queue
   where h.status = '${status}' and h.${column} < clock_timestamp() - make_interval(secs => q.zombie_timeout_seconds) ${scope}
     for update of h skip locked)`
}

export async function rescueZombies (db: Db, scope: RescueScope): Promise<RescueResult> {
  const byQueue: Record<string, number> = {}
  const count = (queues: string[]): number => {
    for (const q of queues) byQueue[q] = (byQueue[q] ?? 0) + 1
    return queues.length
  }
  const back = "set status = 'pending', lease = null, worker_id = null, fetched_at = null, started_at = null, heartbeat_at = null, last_error = coalesce(last_error, '') || $1"
  const queues = [...scope.queues]
  const idempotent = scope.types.filter(t => t.idempotent).map(t => t.type)
  const once = scope.types.filter(t => !t.idempotent).map(t => t.type)
  const f = await db.query<{ queue: string }>(
    `update jobs.jobs_hot ${back} where ${STALE('fetched')} returning queue`,
    ['[rescued: fetched, never started]'])
  const p = await db.query<{ queue: string }>(
    `update jobs.jobs_hot ${back} where ${STALE('processing', 'and h.queue = any($2::text[]) and h.type = any($3::text[])')} returning queue`,
    ['[rescued: zombie, idempotent re-run]', queues, idempotent])
  const dead = await toDead(db, STALE('processing', 'and h.queue = any($1::text[]) and h.type = any($2::text[])'), [queues, once],
    'zombie', 'worker lost (heartbeat stopped) while running a non-idempotent job')
  return {
    requeuedFetched: count(f.rows.map(r => r.queue)),
    requeuedProcessing: count(p.rows.map(r => r.queue)),
    dead: count(dead),
    byQueue,
  }
}

/**
 * Processing jobs stale for more than twice their queue's zombie timeout: no
 * live worker that knows them has rescued them. Fleet-wide.
 */
export async function strandedZombies (db: Db): Promise<StrandedZombies[]> {
  const { rows } = await db.query<{ queue: string, type: string, jobs: number, oldest: number }>(
    `select h.queue, h.type, count(*)::int as jobs, extract(epoch from clock_timestamp() - min(h.heartbeat_at))::float8 as oldest
       from jobs.jobs_hot h join jobs.queues q on q.name = h.queue
      where h.status = 'processing' and h.heartbeat_at < clock_timestamp() - make_interval(secs => 2 * q.zombie_timeout_seconds)
      group by h.queue, h.type order by h.queue, h.type`)
  return rows.map(r => ({ queue: r.queue, type: r.type, jobs: r.jobs, oldestHeartbeatAgeSeconds: r.oldest }))
}
