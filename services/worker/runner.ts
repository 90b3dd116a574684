// The worker loop: one round trip per cycle (shared/queue/claim.ts fetchJobs)
// archives the jobs this worker finished since the last cycle and claims, already
// started, what its free local slots allow (the claim enforces MaxWorkers
// fleet-wide). A cycle runs when jobs finish (once per batch: finishes in the
// same turn of the event loop share one), when PostgreSQL NOTIFYs (enqueue,
// queue change) and at the poll interval; one cycle at a time, and finishes that
// arrive meanwhile go in the next. A finished job keeps its heartbeat until its
// completion is committed. Failures are written one by one (retry with backoff
// or dead letter): they are rare, and each needs its own decision. Zombie rescue
// runs on its own timer in every worker (safe to run concurrently: it skips
// locked rows), over the queues and job types this worker knows
// (shared/queue/rescue.ts says why); it also reports zombies nobody running can
// judge, as `stranded`. Drain stops claiming, lets running jobs finish and
// completes them, then aborts and releases whatever is left. Every so many
// claims it vacuums jobs_hot (shared/queue/vacuum.ts says why), off the cycle.
// A worker never asks for more of a queue than its MaxWorkers (read from
// jobs.queues at start, on each jobs_control NOTIFY and with each heartbeat): the
// claim would refuse the rest anyway, and asking costs a round trip. So a NOTIFY
// for a queue whose slots here are all taken wakes nothing: a lane that enqueues a
// job per shed request NOTIFYs ~100 times a second while its queue's few slots are
// busy, and each NOTIFY used to cost a jobs.fetch that claimed nothing
// (tax-reconcile in a brownout: ~0.1 of a core, worker and backends).
import crypto from 'node:crypto'
import { EventEmitter } from 'node:events'
import type pg from 'pg'
import { createClient, type StartRetry } from '../../shared/db/pool.ts'
import { fetchJobs } from '../../shared/queue/claim.ts'
import { fail } from '../../shared/queue/fail.ts'
import { heartbeat } from '../../shared/queue/heartbeat.ts'
import { mayVacuum, vacuumClaimTable } from '../../shared/queue/vacuum.ts'
import { rescueZombies, strandedZombies, type StrandedZombies } from '../../shared/queue/rescue.ts'
import { workerGone, workerSeen } from '../../shared/queue/workers.ts'
import type { Job } from '../../shared/queue/types.ts'
import type { JobType } from '../../shared/queue/job-types.ts'
import { inCarriedSpan, SpanKind } from '../../shared/tracing.ts'

export interface WorkerOptions {
  pool: pg.Pool
  /** A connection string for the LISTEN client (same role as the pool). */
  databaseUrl: string
  /**
   * How start() retries the LISTEN client's connect (the start budget of the
   * pool's role); by default it tries once.
   */
  startRetry?: StartRetry
  /** Queue -> local slots. */
  queues: Record<string, number>
  types: readonly JobType[]
  /** Pools per lane role, for job types that declare a lane. */
  lanePools?: Partial<Record<string, pg.Pool>>
  workerId?: string
  pollMs?: number
  heartbeatMs?: number
  rescueMs?: number
  backoff?: { baseMs?: number, capMs?: number }
  /** Vacuum jobs_hot after everyJobs claimed here, at most once per minMs (everyJobs 0: never). */
  vacuum?: { everyJobs: number, minMs: number }
  log: { info (o: object, m: string): void, warn (o: object, m: string): void, error (o: object, m: string): void }
}

interface Running {
  job: Job
  ac: AbortController
  t0: number
  /** Settles once the job's outcome is written (for a success: its completion committed). */
  done: Promise<void>
  /** true while its handler runs; false once it finished and waits for its completion. */
  executing: boolean
}

interface Finished { entry: Running, result: unknown, settle: (outcome: 'completed' | 'lost') => void }

export class Worker extends EventEmitter {
  readonly id: string
  readonly #o: WorkerOptions
  readonly #types: Map<string, JobType>
  readonly #running = new Map<string, Running>()
  /** Jobs whose handler succeeded, to complete in the next cycle. */
  #finished: Finished[] = []
  #listener: pg.Client | undefined
  #timers: NodeJS.Timeout[] = []
  #cycle: Promise<void> | undefined
  #scheduled = false
  #again = false
  #draining = false
  #stopped = false
  /** fetches: fetch cycles that went to the database. */
  readonly stats = {
    fetches: 0, claimed: 0, completed: 0, failed: 0, vacuums: 0, rescued: {} as Record<string, number>,
  }

  /** Queue -> its MaxWorkers (absent: unlimited, or not read yet). */
  #limits = new Map<string, number>()
  #mayVacuum = false
  #claimedSinceVacuum = 0
  #vacuumAt = 0
  #vacuum: Promise<void> | undefined
  /** Zombies no running worker knowing them has rescued, fleet-wide, as of the last rescue cycle. */
  stranded: StrandedZombies[] = []
  #strandedLoggedAt = 0

  constructor (o: WorkerOptions) {
    super()
    this.#o = o
    this.id = o.workerId ?? `${process.pid}-${crypto.randomBytes(3).toString('hex')}`
    this.#types = new Map(o.types.map(t => [t.type, t]))
  }

  /** Jobs whose handler is running now, per queue. */
  runningByQueue (): Record<string, number> {
    const out: Record<string, number> = Object.fromEntries(Object.keys(this.#o.queues).map(q => [q, 0]))
    for (const r of this.#running.values()) if (r.executing) out[r.job.queue] = (out[r.job.queue] ?? 0) + 1
    return out
  }

  async start (): Promise<void> {
    // A client that failed to connect cannot connect again: each try is a new one.
    const retry: StartRetry = this.#o.startRetry ?? (fn => fn())
    const l = await retry(async () => {
      const c = createClient(this.#o.databaseUrl, `watertight-worker-listen-${this.id}`)
      c.on('error', err => this.#o.log.warn({ err }, 'listen client error; polling continues'))
      await c.connect()
      return c
    })
    l.on('notification', msg => {
      const q = msg.payload
      if (q && !(q in this.#o.queues)) return
      // A queue changed (admin): read its limit again before looking.
      if (msg.channel === 'jobs_control') { void this.#readLimits().finally(() => this.wake()); return }
      // A job for a queue whose slots are all taken here: nothing to claim until
      // one of them finishes (which wakes the worker), or the poll.
      if (q && this.#free(q, this.#runningIn(q)) <= 0) return
      this.wake()
    })
    await l.query('listen jobs_enqueued')
    await l.query('listen jobs_control')
    this.#listener = l
    await this.#seen()
    await this.#readLimits()
    if ((this.#o.vacuum?.everyJobs ?? 0) > 0) {
      this.#mayVacuum = await mayVacuum(this.#o.pool)
      if (!this.#mayVacuum) this.#o.log.warn({}, 'this role may not vacuum jobs.jobs_hot (PostgreSQL before 17, or no MAINTAIN grant): claims rely on autovacuum and slow down between its runs')
    }
    const every = (ms: number, fn: () => void): void => {
      const t = setInterval(fn, ms)
      t.unref()
      this.#timers.push(t)
    }
    every(this.#o.pollMs ?? 1_000, () => this.wake())
    every(this.#o.heartbeatMs ?? 2_000, () => { void this.#beat(); void this.#seen().catch(err => this.#o.log.warn({ err }, 'worker registration failed')); void this.#readLimits() })
    every(this.#o.rescueMs ?? 5_000, () => { void this.#rescue() })
    this.wake()
  }

  /**
   * Run a fetch cycle soon: after the current turn of the event loop (so jobs
   * finishing together share it), or right after the cycle in flight.
   */
  wake (): void {
    if (this.#stopped) return
    if (this.#cycle) { this.#again = true; return }
    if (this.#scheduled) return
    this.#scheduled = true
    setImmediate(() => {
      this.#scheduled = false
      this.#cycle = this.#fetch().catch(err => {
        this.#o.log.error({ err }, 'fetch cycle failed')
        // Completions still to write: try again after a poll interval, timers or not (drain has none).
        if (this.#finished.length > 0) setTimeout(() => this.wake(), this.#o.pollMs ?? 1_000).unref()
      }).finally(() => {
        this.#cycle = undefined
        if (this.#again) { this.#again = false; this.wake() }
      })
    })
  }

  async #fetch (): Promise<void> {
    const running = this.runningByQueue()
    const slots = this.#draining
      ? {}
      : Object.fromEntries(Object.keys(this.#o.queues).map(q => [q, this.#free(q, running[q] ?? 0)]))
    const finished = this.#finished
    if (finished.length === 0 && Object.values(slots).every(n => n <= 0)) return
    this.#finished = []
    this.stats.fetches++
    let r
    try {
      const done = finished.map(f => ({ id: f.entry.job.id, lease: f.entry.job.lease!, result: f.result }))
      r = await fetchJobs(this.#o.pool, { workerId: this.id, slots, done })
    } catch (err) {
      // Not written (or not known to be): try again in the next cycle; the heartbeat keeps them alive meanwhile.
      this.#finished.unshift(...finished)
      throw err
    }
    for (const f of finished) f.settle(r.completed.has(f.entry.job.id) ? 'completed' : 'lost')
    this.stats.claimed += r.jobs.length
    for (const job of r.jobs) this.#run(job)
    this.#claimedSinceVacuum += r.jobs.length
    this.#maybeVacuum()
  }

  /** One vacuum at a time, never in the cycle's way; a failure is logged and the next one tries again. */
  #maybeVacuum (): void {
    const v = this.#o.vacuum
    if (!this.#mayVacuum || !v || v.everyJobs <= 0 || this.#vacuum || this.#stopped) return
    if (this.#claimedSinceVacuum < v.everyJobs || performance.now() - this.#vacuumAt < v.minMs) return
    this.#claimedSinceVacuum = 0
    this.#vacuumAt = performance.now()
    this.#vacuum = vacuumClaimTable(this.#o.pool)
      .then(() => { this.stats.vacuums++ })
      .catch(err => this.#o.log.warn({ err }, 'vacuum of jobs.jobs_hot failed'))
      .finally(() => { this.#vacuum = undefined })
  }

  #run (job: Job): void {
    const entry: Running = {
      job, ac: new AbortController(), t0: performance.now(), done: Promise.resolve(), executing: true,
    }
    this.#running.set(job.id, entry)
    entry.done = this.#execute(entry).then(outcome => {
      this.#running.delete(job.id)
      if (outcome === 'completed') this.stats.completed++
      else this.stats.failed++
      this.emit('job', { queue: job.queue, type: job.type, outcome, seconds: (performance.now() - entry.t0) / 1000 })
    })
  }

  /** Run the handler (the job is started: the claim did it) and write its outcome. */
  async #execute (entry: Running): Promise<string> {
    const { job, ac } = entry
    const type = this.#types.get(job.type)
    let result: unknown
    try {
      if (!type) {
        entry.executing = false
        return await fail(this.#o.pool, job.id, job.lease!, `no handler for job type ${job.type} in worker ${this.id}`, { fatal: true, ...this.#o.backoff })
      }
      const db = type.lane ? this.#o.lanePools?.[type.lane] : undefined
      const attributes = { 'watertight.job.id': job.id, 'watertight.job.queue': job.queue, 'watertight.job.attempt': job.attempts }
      result = await inCarriedSpan(`job ${job.type}`, job.payload, { kind: SpanKind.CONSUMER, attributes },
        () => type.run(job.payload, { signal: ac.signal, job, db }))
    } catch (err) {
      entry.executing = false
      try {
        const fatal = (err as { fatal?: boolean }).fatal === true
        const deferred = (err as { deferred?: boolean }).deferred === true
        const message = (err as Error).message ?? String(err)
        return await fail(this.#o.pool, job.id, job.lease!, message, { fatal, deferred, ...this.#o.backoff })
      } catch (e) {
        this.#o.log.error({ err: e, job: job.id }, 'job bookkeeping failed; rescue will pick it up')
        return 'error'
      } finally { this.wake() }
    }
    entry.executing = false
    const outcome = new Promise<'completed' | 'lost'>(resolve => this.#finished.push({ entry, result, settle: resolve }))
    this.wake()
    return await outcome
  }

  /**
   * Jobs of queue q this worker may still ask for: its local slots, never above
   * the queue's MaxWorkers, less the `running` it runs.
   */
  #free (q: string, running: number): number {
    if (this.#held(q)) return 0
    const n = this.#o.queues[q] ?? 0
    return Math.max(0, Math.min(n, this.#limits.get(q) ?? n) - running)
  }

  /** A queue whose job types all say they are held (their dependency is down): nothing to claim. */
  #held (q: string): boolean {
    let any = false
    for (const t of this.#types.values()) {
      if (t.queue !== q) continue
      if (!t.held?.()) return false
      any = true
    }
    return any
  }

  #runningIn (q: string): number {
    let n = 0
    for (const r of this.#running.values()) if (r.executing && r.job.queue === q) n++
    return n
  }

  /** Each queue's MaxWorkers; on failure the last ones read stay (the claim enforces the limit in any case). */
  async #readLimits (): Promise<void> {
    try {
      const { rows } = await this.#o.pool.query<{ name: string, max_workers: number | null }>('select name, max_workers from jobs.queues where name = any($1::text[])', [Object.keys(this.#o.queues)])
      this.#limits = new Map(rows.filter(r => r.max_workers !== null).map(r => [r.name, r.max_workers!]))
    } catch (err) { this.#o.log.warn({ err }, 'reading the queues\' limits failed') }
  }

  /** Our row in the worker registry, alive for a few heartbeats (a loaded host may delay one or two). */
  #seen (): Promise<void> {
    return workerSeen(this.#o.pool, this.id, this.#o.queues, 5 * (this.#o.heartbeatMs ?? 2_000) + 1_000)
  }

  async #beat (): Promise<void> {
    const ids = [...this.#running.values()].map(r => ({ id: r.job.id, lease: r.job.lease! }))
    await heartbeat(this.#o.pool, ids).catch(err => this.#o.log.warn({ err }, 'heartbeat failed'))
  }

  async #rescue (): Promise<void> {
    try {
      const types = [...this.#types.values()].map(t => ({ type: t.type, idempotent: t.idempotent }))
      const scope = { queues: Object.keys(this.#o.queues), types }
      const r = await rescueZombies(this.#o.pool, scope)
      for (const [q, n] of Object.entries(r.byQueue)) this.stats.rescued[q] = (this.stats.rescued[q] ?? 0) + n
      if (r.requeuedFetched + r.requeuedProcessing + r.dead > 0) { this.#o.log.warn({ ...r }, 'rescued zombie jobs'); this.emit('rescued', r) }
      this.stranded = await strandedZombies(this.#o.pool)
      // Once a minute while any are left: every worker says it, so the log of any one shows it.
      if (this.stranded.length > 0 && Date.now() - this.#strandedLoggedAt >= 60_000) {
        this.#strandedLoggedAt = Date.now()
        this.#o.log.warn({ stranded: this.stranded }, 'zombie jobs that no running worker knowing their queue and type has rescued: start a worker for them')
      }
    } catch (err) { this.#o.log.warn({ err }, 'zombie rescue failed') }
  }

  /** Stop claiming; let running jobs finish (and complete them) for up to graceMs, then abort and release them. */
  async drain (graceMs = 10_000): Promise<void> {
    this.#draining = true
    for (const t of this.#timers) clearInterval(t)
    await workerGone(this.#o.pool, this.id).catch(err => this.#o.log.warn({ err }, 'worker deregistration failed'))
    await this.#cycle
    const all = Promise.all([...this.#running.values()].map(r => r.done))
    const grace = new Promise<boolean>(resolve => setTimeout(() => resolve(true), graceMs).unref())
    const timedOut = await Promise.race([all.then(() => false), grace])
    if (timedOut) {
      for (const r of this.#running.values()) r.ac.abort(new Error('worker draining'))
      await all
    }
    this.#stopped = true
    await this.#cycle
    await this.#vacuum
    await this.#listener?.end().catch(() => {})
  }
}
