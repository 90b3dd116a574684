// watertight's queue in the side-by-side bench, two ways: the library calls the
// worker makes (claimers in this process calling fetchJobs), and two of the
// fleet's real worker processes (services/worker/main.ts: HTTP app, LISTEN,
// heartbeats, registry, rescue — production defaults except the queues and
// WORKER_SLOTS), started as children on the same database.
import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import readline from 'node:readline'
import type pg from 'pg'
import { updateQueue } from '../../shared/queue/admin.ts'
import { fetchJobs, type Done } from '../../shared/queue/claim.ts'
import { enqueue, enqueueMany } from '../../shared/queue/enqueue.ts'
import { workerGone, workerSeen } from '../../shared/queue/workers.ts'
import {
  concurrently, countRows, intervalsUs, maxOverlap, median, paced, percentile, settle, sleep, until, type Figures,
} from './measure.ts'

export interface OursOptions {
  pool: pg.Pool
  /** The jobs_ds role's URL, for the worker processes. */
  jobsUrl: string
  jobs: number
  singleJobs: number
  limit: number
  /** Library claimers and their slots, unlimited run. */
  claimers: number
  claimerSlots: number
  /**
   * Worker processes' WORKER_SLOTS for the unlimited run (the limited run has
   * 2 x limit: the fleet's default 20 for MaxWorkers 10, so the limit binds).
   */
  workerSlots: number
  latency: { jobs: number, rate: number }
  capMs: number
  /** Limited and equal-concurrency runs, alternated (ABBA), for the limit's cost: medians of each. */
  pairs: number
  log: (m: string) => void
}

/**
 * The limit's cost is a ratio of two throughputs that each swing ±20% between
 * runs on a shared host. Measure them alternately — equal, limited, limited,
 * equal, … — so drift in the host falls on both alike, and keep the median of
 * each. One short run of each goes first, untimed: which run comes first is
 * not what the ratio is about (an early run of a round read a third of the
 * others while rounds started on deleted rather than truncated rows).
 */
async function alternated (
  o: OursOptions, equal: (n: number) => Promise<number>, limited: (n: number) => Promise<number>
): Promise<Pick<Figures, 'unlimitedEqual' | 'limited' | 'equalRuns' | 'limitedRuns'>> {
  const warm = Math.max(100, Math.round(o.jobs / 10))
  await equal(warm); await limited(warm)
  const equalRuns: number[] = []; const limitedRuns: number[] = []
  for (let i = 0; i < o.pairs; i++) {
    if (i % 2 === 0) {
      equalRuns.push(await equal(o.jobs))
      limitedRuns.push(await limited(o.jobs))
    } else {
      limitedRuns.push(await limited(o.jobs))
      equalRuns.push(await equal(o.jobs))
    }
  }
  return { unlimitedEqual: median(equalRuns), limited: median(limitedRuns), equalRuns, limitedRuns }
}

const Q = { free: 'wt-free', limit: 'wt-limit', equal: 'wt-equal', lat: 'wt-latency' }
const ALL = Object.values(Q)

async function reset (pool: pg.Pool, limit: number): Promise<void> {
  for (const q of ALL) {
    await pool.query('insert into jobs.queues (name) values ($1) on conflict do nothing', [q])
    await updateQueue(pool, q, { maxWorkers: q === Q.limit ? limit : null, paused: true, active: true })
  }
  // Empty tables at the start of each round, as each peer gets (a database of
  // its own, created anew): rows deleted rather than truncated left round 2
  // about 15% slower than round 1. The bench's database holds only its queues.
  await pool.query('truncate jobs.jobs_hot, jobs.jobs_archive, jobs.workers, jobs.shares')
  await pool.query('vacuum analyze jobs.jobs_hot, jobs.jobs_archive')
}

const hot = (pool: pg.Pool, q: string) => (probe: boolean): Promise<number> =>
  countRows(pool, 'select 1 from jobs.jobs_hot where queue = $1', [q], probe)

const activeIntervals = (pool: pg.Pool, q: string) => intervalsUs(pool,
  `select (extract(epoch from fetched_at) * 1e6)::bigint::text as s, (extract(epoch from finished_at) * 1e6)::bigint::text as e
     from jobs.jobs_archive where queue = $1`, [q])

/**
 * n new jobs on a queue, its jobs of the run before gone (a capped run may
 * leave some): each run counts only its own.
 */
const fresh = async (pool: pg.Pool, q: string, n: number): Promise<void> => {
  await pool.query('delete from jobs.jobs_hot where queue = $1', [q])
  await pool.query('delete from jobs.jobs_archive where queue = $1', [q])
  await bulk(pool, q, n)
}

const settleJobs = (pool: pg.Pool): Promise<void> => settle(pool, 'jobs.jobs_hot, jobs.jobs_archive')

const bulk = (pool: pg.Pool, q: string, n: number) =>
  enqueueMany(pool, q, 'noop', Array.from({ length: n }, (_, i) => ({ payload: { i } })))

/** Library claimers on one queue until n jobs are completed; jobs/s. */
async function claimers (pool: pg.Pool, q: string, n: number, count: number, slots: number): Promise<number> {
  let completed = 0
  const ids = Array.from({ length: count }, (_, i) => `bench-lib-${process.pid}-${i}`)
  for (const id of ids) await workerSeen(pool, id, { [q]: slots }, 600_000)
  await updateQueue(pool, q, { paused: false })
  const t0 = performance.now()
  await Promise.all(ids.map(async id => {
    let done: Done[] = []
    while (completed < n || done.length > 0) {
      const r = await fetchJobs(pool, { workerId: id, slots: { [q]: completed < n ? slots : 0 }, done })
      completed += r.completed.size
      // No-op jobs: done as soon as claimed.
      done = r.jobs.map(j => ({ id: j.id, lease: j.lease!, result: null }))
      if (done.length === 0 && completed < n) await sleep(2)
    }
  }))
  const jps = n / ((performance.now() - t0) / 1000)
  for (const id of ids) await workerGone(pool, id)
  return jps
}

export async function oursLibrary (o: OursOptions): Promise<Figures> {
  const f: Figures = {}
  await reset(o.pool, o.limit)
  f.enqueueSingle = await concurrently(o.singleJobs, 8, i => enqueue(o.pool, Q.free, 'noop', { i }))
  await o.pool.query('delete from jobs.jobs_hot where queue = $1', [Q.free])
  await o.pool.query('vacuum analyze jobs.jobs_hot')
  const t0 = performance.now()
  await bulk(o.pool, Q.free, o.jobs)
  f.enqueueBulk = o.jobs / ((performance.now() - t0) / 1000)
  await settleJobs(o.pool)
  f.unlimited = await claimers(o.pool, Q.free, o.jobs, o.claimers, o.claimerSlots)

  // Where the limit binds: 2 claimers x 2*limit slots on MaxWorkers = limit; against 2 x limit/2 unlimited.
  Object.assign(f, await alternated(o, async n => {
    await fresh(o.pool, Q.equal, n)
    await settleJobs(o.pool)
    return await claimers(o.pool, Q.equal, n, 2, Math.ceil(o.limit / 2))
  }, async n => {
    await fresh(o.pool, Q.limit, n)
    await settleJobs(o.pool)
    const jps = await claimers(o.pool, Q.limit, n, 2, 2 * o.limit)
    f.maxActive = Math.max(f.maxActive ?? 0, maxOverlap(await activeIntervals(o.pool, Q.limit)))
    return jps
  }))
  return f
}

interface Workers { procs: ChildProcess[], stop (): Promise<void> }

async function startWorkers (o: OursOptions, queues: string[], n: number, slots: number): Promise<Workers> {
  const root = path.resolve(import.meta.dirname, '../..')
  const procs = Array.from({ length: n }, () => spawn(process.execPath, ['--import', 'tsx', 'services/worker/main.ts'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      DATABASE_URL: o.jobsUrl,
      WORKER_QUEUES: queues.join(','),
      WORKER_SLOTS: String(slots),
      WORKER_PORT: '0',
      WORKER_REPLICAS: String(n),
      LOG_LEVEL: 'info',
    },
  }))
  const stop = async (): Promise<void> => {
    await Promise.all(procs.map(p => p.exitCode !== null || p.signalCode !== null
      ? undefined
      : new Promise<void>(resolve => { p.once('exit', () => resolve()); p.kill('SIGTERM') })))
  }
  try {
    await Promise.all(procs.map(p => new Promise<void>((resolve, reject) => {
      const lines: string[] = []
      const timer = setTimeout(() => reject(new Error(`worker did not start:\n${lines.join('\n')}`)), 60_000)
      const on = (l: string): void => {
        if (lines.length < 50) lines.push(l)
        if (l.includes('"worker started"')) { clearTimeout(timer); resolve() } else if (/"level":(4|5)\d/.test(l)) o.log(`worker: ${l}`)
      }
      readline.createInterface({ input: p.stdout! }).on('line', on)
      readline.createInterface({ input: p.stderr! }).on('line', on)
      p.once('exit', code => { clearTimeout(timer); reject(new Error(`worker exited ${code}:\n${lines.join('\n')}`)) })
    })))
  } catch (err) { await stop(); throw err }
  return { procs, stop }
}

/** Release a paused queue holding n jobs to running workers; jobs/s until the hot table has none of them. */
async function release (o: OursOptions, q: string, n: number): Promise<{ jps: number, left: number }> {
  await settleJobs(o.pool)
  const t0 = performance.now()
  await updateQueue(o.pool, q, { paused: false })
  const r = await until(hot(o.pool, q), t0, o.capMs)
  return { jps: (n - r.left) / (r.ms / 1000), left: r.left }
}

export async function oursWorkers (o: OursOptions): Promise<Figures> {
  const f: Figures = {}
  await reset(o.pool, o.limit)
  await bulk(o.pool, Q.free, o.jobs)
  // Each run with workers serving only its queue, as the fleet runs them (one lane's queues per worker).
  const w = await startWorkers(o, [Q.free, Q.lat], 2, o.workerSlots)
  try {
    f.unlimited = (await release(o, Q.free, o.jobs)).jps
    // Latency: paced single enqueues to idle workers.
    await updateQueue(o.pool, Q.lat, { paused: false })
    await paced(o.latency.jobs, o.latency.rate, i => enqueue(o.pool, Q.lat, 'noop', { i }))
    await until(hot(o.pool, Q.lat), performance.now(), 30_000)
    const { rows } = await o.pool.query<{ ms: number }>(
      'select extract(epoch from finished_at - created_at)::float8 * 1000 as ms from jobs.jobs_archive where queue = $1 order by 1', [Q.lat])
    const ms = rows.map(r => r.ms)
    f.p50Ms = percentile(ms, 50); f.p99Ms = percentile(ms, 99)
  } finally { await w.stop() }
  // The limit (2 processes x 2*limit slots on MaxWorkers = limit) against the
  // same two processes with the limit's worth of slots, unlimited.
  Object.assign(f, await alternated(o, async n => {
    await fresh(o.pool, Q.equal, n)
    const w = await startWorkers(o, [Q.equal], 2, Math.ceil(o.limit / 2))
    try {
      return (await release(o, Q.equal, n)).jps
    } finally { await w.stop(); await updateQueue(o.pool, Q.equal, { paused: true }) }
  }, async n => {
    await fresh(o.pool, Q.limit, n)
    const w = await startWorkers(o, [Q.limit], 2, 2 * o.limit)
    try {
      const lim = await release(o, Q.limit, n)
      f.limitedLeft = Math.max(f.limitedLeft ?? 0, lim.left)
      f.maxActive = Math.max(f.maxActive ?? 0, maxOverlap(await activeIntervals(o.pool, Q.limit)))
      return lim.jps
    } finally { await w.stop(); await updateQueue(o.pool, Q.limit, { paused: true }) }
  }))
  return f
}
