// Claim pending jobs for a worker, never more than a queue's MaxWorkers across
// every worker process of the fleet.
//
// Why the query is shaped like this. Three strategies were considered:
//  1. ChokaQ's single statement: count active jobs per queue in a CTE and claim
//     `max_workers - active` candidates with FOR UPDATE SKIP LOCKED. Under READ
//     COMMITTED two claimers run the statement on the same snapshot, both see the
//     same free slot and both take it: the limit is best-effort (ChokaQ's docs
//     say so; pg-boss warns the same of its group limit). Overshoot is real.
//  2. SERIALIZABLE isolation for the claim: correct, but every conflict is a
//     serialization failure to retry, and under load claimers mostly retry.
//  3. (chosen) Serialize claimers per queue, then count and claim in a fresh
//     statement: `SELECT … FROM jobs.queues … FOR NO KEY UPDATE` takes the queue rows
//     (in name order, so two claimers cannot deadlock) and re-reads their current
//     max_workers/paused/active. A claimer that held the lock before us has
//     committed by the time we get it, so the count below, a new statement with a
//     new snapshot, sees its claims. Completions between our count and our update
//     only make the count too high: the error is always on the safe side. The
//     limit is hard.
// NO KEY UPDATE, not UPDATE: it still excludes other claimers and queue updates,
// but not the KEY SHARE lock an enqueue's foreign key takes on the queue row, so
// enqueues never wait behind a claim.
// Cost: claimers of one queue wait for each other for one short transaction (a
// count over the active-jobs index plus an UPDATE of at most `free` rows).
// `npm run bench:queue` (2026-11-30, 2 cores, 4 claimers x 10, no-op jobs):
// unlimited 1,202 jobs/s, MaxWorkers on 1,139 jobs/s (claim p99 29 -> 37 ms):
// the hard limit cost 5.3%; earlier runs 1.1-4.0%. (A peer's global limit
// halved its throughput.)
import type pg from 'pg'
import type { Job } from './types.ts'

export interface ClaimRequest {
  workerId: string
  /** Queue name -> how many more jobs this worker can run locally. */
  slots: Record<string, number>
}

export async function claim (client: pg.PoolClient, req: ClaimRequest): Promise<Job[]> {
  const names = Object.entries(req.slots).filter(([, n]) => n > 0).map(([q]) => q).sort()
  if (names.length === 0) return []
  await client.query('begin')
  try {
    const { rows: queues } = await client.query<{ name: string, max_workers: number | null }>(
      `select name, max_workers from jobs.queues
        where name = any($1::text[]) and active and not paused
        order by name
          for no key update`, [names])
    const claimed: Job[] = []
    for (const q of queues) {
      let free = req.slots[q.name]!
      if (q.max_workers !== null) {
        const { rows } = await client.query<{ n: number }>(
          "select count(*)::int as n from jobs.jobs_hot where queue = $1 and status in ('fetched', 'processing')", [q.name])
        free = Math.min(free, q.max_workers - rows[0]!.n)
      }
      if (free <= 0) continue
      const { rows } = await client.query<Job>(
        `update jobs.jobs_hot h
            set status = 'fetched', worker_id = $2, lease = gen_random_uuid(), fetched_at = clock_timestamp()
          where h.id in (
                select id from jobs.jobs_hot
                 where queue = $1 and status = 'pending' and scheduled_at <= now()
                 order by priority desc, scheduled_at, id
                 limit $3
                   for update skip locked)
        returning h.id, h.queue, h.type, h.payload, h.status, h.priority, h.attempts, h.max_attempts, h.idempotency_key, h.worker_id, h.lease`,
        [q.name, req.workerId, free])
      claimed.push(...rows)
    }
    await client.query('commit')
    return claimed
  } catch (err) {
    await client.query('rollback').catch(() => {})
    throw err
  }
}
