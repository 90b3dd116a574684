// Claim pending jobs for a worker, never more than a queue's MaxWorkers across
// every worker process of the fleet. Both calls below are one statement, one
// round trip: `select … from jobs.fetch(…)` (shared/db/migrations/0007).
//
// Why the hard limit holds. The limit is broken only if two claims of one queue
// count the same free slot. ChokaQ's single statement (count active jobs in a
// CTE, claim `max_workers - active` with FOR UPDATE SKIP LOCKED) does exactly
// that under READ COMMITTED: two claimers run it on snapshots that both predate
// the other's claim, see the same free slot and both take it (ChokaQ's docs
// call its MaxWorkers best-effort; pg-boss says the same of its group limit).
// So jobs.fetch serializes the claimers of a limited queue on a
// transaction-scoped advisory lock (727003, hashtext(queue)), and counts in a
// later statement than the one that got the lock: a PL/pgSQL function that is
// VOLATILE takes a fresh snapshot for each statement, and a transaction is
// visible to others before its locks are released, so the count sees every
// claim of the claimer that held the lock before. Only a claim raises the
// active count; completions, failures, rescues and deactivation between our
// count and our update only lower it, so the error is always on the safe side.
// Queues without a limit are claimed under the same lock taken shared:
// unlimited claimers do not wait for each other, yet a change of the queue row
// (a trigger takes the lock exclusive before any UPDATE of jobs.queues) waits
// for claims in flight and they for it, so a limit set at run time counts every
// job claimed before it. Claimers take their locks in queue-name order, so two
// of them never wait for each other in a cycle.
//
// Strategies measured (no-op jobs, one queue, 2 cores, claim+complete jobs/s;
// `npm run bench:queue`, docs/queue-benchmarks.md has the dated runs):
//  1. ChokaQ's single statement: fast, but not a limit (overshoot is real).
//  2. SERIALIZABLE claims: correct, but under load claimers mostly retry
//     serialization failures.
//  3. Lock the queue row FOR NO KEY UPDATE, count and claim, one statement per
//     step in an explicit transaction; start and complete one job per round
//     trip (until 2026-12): 1,202 jobs/s unlimited, 1,139 with the limit on.
//     The limit cost 5%; the queue cost everything else: 3 + 2 round trips
//     per job, a commit per job.
//  4. (chosen) jobs.fetch: the same argument with an advisory lock instead of
//     the row lock (no heap write, no WAL, no tuple lock on every claim), in one
//     function call; start folded into the claim (status processing at once);
//     the worker's finished jobs completed in the same call, ahead of the claim,
//     so one commit per batch both frees and refills its slots.
//
// Fair share. Completing and claiming in one transaction means the worker that
// frees a slot of a limited queue takes it back before anyone else can see it
// free: one process would keep the queue to itself. So jobs.fetch leaves each
// other live worker serving the queue (jobs.workers, refreshed with the
// heartbeat) what it is owed — up to ceil(max_workers / workers), less what it
// holds — unless the claimer is owed too, and NOTIFYs jobs_control when it left
// slots for them. This only ever lowers a claim; the limit itself rests on the
// count alone.
import type { Db, Job } from './types.ts'

export interface ClaimRequest {
  workerId: string
  /** Queue name -> how many more jobs this worker can run locally. */
  slots: Record<string, number>
}

export interface Done { id: string, lease: string, result?: unknown }

export interface FetchRequest extends ClaimRequest {
  /** Jobs this worker finished: archived first, in the same call, if their lease still holds. */
  done?: readonly Done[]
}

export interface FetchResult {
  /** Ids of the done jobs that were archived (the others had lost their lease). */
  completed: Set<string>
  /** Claimed jobs, started (status processing, attempts counted). */
  jobs: Job[]
}

type Row = Job & { done: boolean }

const FETCH = 'select * from jobs.fetch($1, $2::text[], $3::int[], $4::bigint[], $5::uuid[], $6::jsonb[], $7)'

function params (req: FetchRequest, start: boolean): unknown[] {
  const queues = Object.keys(req.slots).sort()
  const done = req.done ?? []
  return [req.workerId, queues, queues.map(q => Math.max(0, Math.floor(req.slots[q]!))),
    done.map(d => d.id), done.map(d => d.lease),
    done.map(d => d.result === undefined || d.result === null ? null : JSON.stringify(d.result)), start]
}

/** Claim without starting (status fetched): the two-phase path, for tools and tests; `start()` moves a job on. */
export async function claim (db: Db, req: ClaimRequest): Promise<Job[]> {
  if (!Object.values(req.slots).some(n => n > 0)) return []
  const { rows } = await db.query<Row>(FETCH, params(req, false))
  return rows.map(strip)
}

/** The worker's cycle: complete what it finished, claim and start what its free slots allow, in one round trip. */
export async function fetchJobs (db: Db, req: FetchRequest): Promise<FetchResult> {
  const out: FetchResult = { completed: new Set(), jobs: [] }
  if ((req.done?.length ?? 0) === 0 && !Object.values(req.slots).some(n => n > 0)) return out
  const { rows } = await db.query<Row>(FETCH, params(req, true))
  for (const r of rows) {
    if (r.done) out.completed.add(r.id)
    else out.jobs.push(strip(r))
  }
  return out
}

function strip (r: Row): Job {
  const { done: _, ...job } = r
  return job
}
