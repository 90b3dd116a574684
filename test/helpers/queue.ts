// Helpers for job-queue tests: queues, bulk enqueue, worker processes, and the
// exact concurrency a queue ever had, computed from the archive's intervals.
import type { Test } from 'tap'
import type { TestDb } from './db.ts'
import { startProcess, type Proc } from './procs.ts'

export async function createQueue (
  db: TestDb, name: string, maxWorkers: number | null, zombieTimeoutSeconds = 60
): Promise<void> {
  await db.query('insert into jobs.queues (name, max_workers, zombie_timeout_seconds) values ($1, $2, $3)', [name, maxWorkers, zombieTimeoutSeconds])
}

export async function enqueueMany (
  db: TestDb, queue: string, type: string, n: number, payload: Record<string, unknown> = {}, maxAttempts = 5
): Promise<void> {
  await db.query('select jobs.enqueue($1, $2, $3, 0, 0, $5) from generate_series(1, $4)', [queue, type, payload, n, maxAttempts])
}

export function startWorker (t: Test, db: TestDb, queues: string[], env: Record<string, string> = {}, name = 'worker'): Promise<Proc> {
  return startProcess(t, name, 'services/worker/main.ts', {
    ...db.env,
    DATABASE_URL: db.roleUrl(db.prefix + 'jobs_ds'),
    WORKER_QUEUES: queues.join(','),
    WORKER_PORT: '0',
    WORKER_POLL_MS: '200',
    WORKER_HEARTBEAT_MS: '200',
    WORKER_RESCUE_MS: '300',
    WORKER_BACKOFF_BASE_MS: '50',
    ...env,
  })
}

/** Highest number of jobs of a queue that were active (claimed, not yet finished) at once. */
export async function maxConcurrency (db: TestDb, queue: string): Promise<number> {
  // Microsecond timestamps (JS Dates would round to milliseconds and could hide an overlap).
  const rows = await db.query<{ s: string, e: string }>(
    `select (extract(epoch from fetched_at) * 1000000)::bigint::text as s, (extract(epoch from finished_at) * 1000000)::bigint::text as e
       from jobs.jobs_archive where queue = $1`, [queue])
  const events = rows.flatMap(r => [{ t: Number(r.s), d: 1 }, { t: Number(r.e), d: -1 }])
  // Ends before starts at the same instant: a slot freed and re-taken is not overlap.
  events.sort((a, b) => a.t - b.t || a.d - b.d)
  let cur = 0; let max = 0
  for (const e of events) { cur += e.d; max = Math.max(max, cur) }
  return max
}

export async function counts (db: TestDb, queue: string): Promise<{ hot: number, archive: number, dead: number }> {
  const [r] = await db.query<{ hot: number, archive: number, dead: number }>(
    `select (select count(*)::int from jobs.jobs_hot where queue = $1) as hot,
            (select count(*)::int from jobs.jobs_archive where queue = $1) as archive,
            (select count(*)::int from jobs.jobs_dead where queue = $1) as dead`, [queue])
  return r!
}
