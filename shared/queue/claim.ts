// Claim pending jobs for a worker, never more than a queue's MaxWorkers across
// every worker process of the fleet. Both calls below are one statement, one
// round trip: `select … from jobs.fetch(…)` (shared/db/migrations/0007; its
// current text is 0012's).
//
// Why the hard limit holds. It breaks only if two claims count the same free
// slot. ChokaQ's single statement (count active jobs in a CTE, claim
// `max_workers - active` with FOR UPDATE SKIP LOCKED) does exactly that under
// READ COMMITTED: two claimers run it on snapshots that both predate the
// other's claim (ChokaQ's docs call its MaxWorkers best-effort; pg-boss says
// the same of its group limit, and overshoots it in our queue bench). jobs.fetch
// keeps one invariant per limited queue:
//     sum over workers of held(w) <= max_workers,
//     held(w) = max(share(w), active(w)) for a worker with a share in
//     jobs.shares, active(w) for anyone else,
// and active jobs never exceed the sum. How each change keeps it:
//  - A claim within one's share (the fast path, the queue's advisory lock
//    taken SHARED, so workers do not wait for each other): active(w) + k <=
//    share(w), held(w) unchanged. One claim per (queue, worker) at a time (a
//    second advisory lock), counting its own active jobs in a statement after
//    that lock, so two claims of one worker cannot both use the same room.
//  - A share that grows, or a claim by a claimer with no share (tools, tests):
//    only under the queue's lock taken EXCLUSIVE, so every other claim has
//    committed, and counted in a later statement than the one that took the
//    lock (a VOLATILE PL/pgSQL function takes a fresh snapshot per statement,
//    and a transaction is visible before its locks are released): held(me) <=
//    max_workers - sum of the others' held. What the others add later stays
//    within their shares, which were counted.
//    A claimer with no share counts the live workers together at no less
//    than their slots up to max_workers (what they are dealt, grown into or
//    not: migration 0011), so it cannot starve them; counting more only
//    lowers what it takes.
//  - Everything else only lowers the sum: completions, failures, rescues and
//    deactivation lower active(w); a worker gives back share above its fair
//    share; drain deletes its shares; a grower deletes the share of a worker
//    no longer live (its active jobs still count, and without the row that
//    worker's fast path claims nothing); a change of the queue row takes the
//    lock exclusive (a trigger) and deletes every share of the queue, so a new
//    limit is counted against every job then active.
// Shares are fair shares: max_workers dealt among the live workers serving the
// queue (jobs.workers, refreshed with the heartbeat), fewest local slots
// first. Without them the worker that completes a job would take its slot back
// in the same transaction, and one process would keep a limited queue.
//
// Strategies tried (no-op jobs, one queue; the figures are in
// docs/queue-benchmarks.md):
//  1. ChokaQ's single statement: fast, but not a limit (it overshoots).
//  2. SERIALIZABLE claims: correct, but under load claimers mostly retry
//     serialization failures.
//  3. Lock the queue row FOR NO KEY UPDATE, count and claim, in an explicit
//     transaction, one job started and completed per round trip: 3 + 2 round
//     trips and a commit per job.
//  4. One call per batch (complete what finished, claim and start the next
//     ones), every claim of a limited queue serialized on an exclusive advisory
//     lock held through its commit: each claim waits for the other's commit (a
//     WAL flush), so the limit costs a large share of the throughput.
//  5. (chosen) 4 with shares: the exclusive lock only to grow a share; the
//     steady state claims under the shared lock, and the commits of both
//     workers share WAL flushes, so the limit costs nothing measurable
//     (`npm run bench -- queue --peers`).
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

// Named: prepared once per connection, not parsed, analyzed and planned on
// every call, where a small batch spends much of its backend time. A new
// body for the function is picked up (PostgreSQL re-plans a prepared
// statement when a function it calls changes); new result columns are not
// (the statement fails with "cached plan must not change result type" on every
// connection that prepared it), so a migration that changes jobs.fetch's
// columns changes this name with them.
const FETCH = { name: 'jobs.fetch', text: 'select * from jobs.fetch($1, $2::text[], $3::int[], $4::bigint[], $5::uuid[], $6::jsonb[], $7)' }

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
  const { rows } = await db.query<Row>({ ...FETCH, values: params(req, false) })
  return rows.map(strip)
}

/** The worker's cycle: complete what it finished, claim and start what its free slots allow, in one round trip. */
export async function fetchJobs (db: Db, req: FetchRequest): Promise<FetchResult> {
  const out: FetchResult = { completed: new Set(), jobs: [] }
  if ((req.done?.length ?? 0) === 0 && !Object.values(req.slots).some(n => n > 0)) return out
  const { rows } = await db.query<Row>({ ...FETCH, values: params(req, true) })
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
