// The worker loop: claim what local slots allow (the claim enforces MaxWorkers
// fleet-wide), run each job with a heartbeat, complete or fail it, and look for
// more when a job ends, when PostgreSQL NOTIFYs (enqueue, queue change) or at the
// poll interval. Zombie rescue runs on its own timer in every worker (safe to run
// concurrently: it skips locked rows), over the queues and job types this worker
// knows (shared/queue/rescue.ts says why); it also reports zombies nobody
// running can judge, as `stranded`. Drain stops claiming, lets running jobs
// finish, then aborts and releases whatever is left.
import crypto from 'node:crypto'
import { EventEmitter } from 'node:events'
import type pg from 'pg'
import { createClient } from '../../shared/db/pool.ts'
import { claim } from '../../shared/queue/claim.ts'
import { complete } from '../../shared/queue/complete.ts'
import { fail } from '../../shared/queue/fail.ts'
import { heartbeat } from '../../shared/queue/heartbeat.ts'
import { start } from '../../shared/queue/start.ts'
import { rescueZombies, strandedZombies, type StrandedZombies } from '../../shared/queue/rescue.ts'
import type { Job } from '../../shared/queue/types.ts'
import type { JobType } from './job-types.ts'

export interface WorkerOptions {
  pool: pg.Pool
  /** A connection string for the LISTEN client (same role as the pool). */
  databaseUrl: string
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
  log: { info (o: object, m: string): void, warn (o: object, m: string): void, error (o: object, m: string): void }
}

interface Running { job: Job, ac: AbortController, done: Promise<void> }

export class Worker extends EventEmitter {
  readonly id: string
  readonly #o: WorkerOptions
  readonly #types: Map<string, JobType>
  readonly #running = new Map<string, Running>()
  #listener: pg.Client | undefined
  #timers: NodeJS.Timeout[] = []
  #cycle: Promise<void> | undefined
  #again = false
  #draining = false
  readonly stats = { claimed: 0, completed: 0, failed: 0, rescued: {} as Record<string, number> }
  /** Zombies no running worker knowing them has rescued, fleet-wide, as of the last rescue cycle. */
  stranded: StrandedZombies[] = []
  #strandedLoggedAt = 0

  constructor (o: WorkerOptions) {
    super()
    this.#o = o
    this.id = o.workerId ?? `${process.pid}-${crypto.randomBytes(3).toString('hex')}`
    this.#types = new Map(o.types.map(t => [t.type, t]))
  }

  runningByQueue (): Record<string, number> {
    const out: Record<string, number> = Object.fromEntries(Object.keys(this.#o.queues).map(q => [q, 0]))
    for (const r of this.#running.values()) out[r.job.queue] = (out[r.job.queue] ?? 0) + 1
    return out
  }

  async start (): Promise<void> {
    const l = createClient(this.#o.databaseUrl, `watertight-worker-listen-${this.id}`)
    l.on('error', err => this.#o.log.warn({ err }, 'listen client error; polling continues'))
    l.on('notification', msg => { if (!msg.payload || msg.payload in this.#o.queues) this.wake() })
    await l.connect()
    await l.query('listen jobs_enqueued')
    await l.query('listen jobs_control')
    this.#listener = l
    const every = (ms: number, fn: () => void): void => { const t = setInterval(fn, ms); t.unref(); this.#timers.push(t) }
    every(this.#o.pollMs ?? 1_000, () => this.wake())
    every(this.#o.heartbeatMs ?? 2_000, () => { void this.#beat() })
    every(this.#o.rescueMs ?? 5_000, () => { void this.#rescue() })
    this.wake()
  }

  /** Run a fetch cycle now (or right after the current one). */
  wake (): void {
    if (this.#draining) return
    if (this.#cycle) { this.#again = true; return }
    this.#cycle = this.#fetch().catch(err => this.#o.log.error({ err }, 'fetch cycle failed')).finally(() => {
      this.#cycle = undefined
      if (this.#again) { this.#again = false; this.wake() }
    })
  }

  async #fetch (): Promise<void> {
    const running = this.runningByQueue()
    const slots = Object.fromEntries(Object.entries(this.#o.queues).map(([q, n]) => [q, n - (running[q] ?? 0)]))
    if (Object.values(slots).every(n => n <= 0)) return
    const client = await this.#o.pool.connect()
    let jobs: Job[]
    try { jobs = await claim(client, { workerId: this.id, slots }) } finally { client.release() }
    this.stats.claimed += jobs.length
    for (const job of jobs) this.#run(job)
  }

  #run (job: Job): void {
    const ac = new AbortController()
    const entry: Running = { job, ac, done: Promise.resolve() }
    this.#running.set(job.id, entry)
    entry.done = (async () => {
      const t0 = performance.now()
      let outcome = 'completed'
      try {
        if (!(await start(this.#o.pool, job.id, job.lease!))) { outcome = 'lost'; return }
        job.attempts++
        const type = this.#types.get(job.type)
        if (!type) {
          outcome = await fail(this.#o.pool, job.id, job.lease!, `no handler for job type ${job.type} in worker ${this.id}`, { fatal: true, ...this.#o.backoff })
          return
        }
        try {
          const result = await type.run(job.payload, { signal: ac.signal, job, db: type.lane ? this.#o.lanePools?.[type.lane] : undefined })
          outcome = (await complete(this.#o.pool, job.id, job.lease!, result)) ? 'completed' : 'lost'
        } catch (err) {
          const fatal = (err as { fatal?: boolean }).fatal === true
          outcome = await fail(this.#o.pool, job.id, job.lease!, (err as Error).message ?? String(err), { fatal, ...this.#o.backoff })
        }
      } catch (err) {
        outcome = 'error'
        this.#o.log.error({ err, job: job.id }, 'job bookkeeping failed; rescue will pick it up')
      } finally {
        this.#running.delete(job.id)
        if (outcome === 'completed') this.stats.completed++
        else this.stats.failed++
        this.emit('job', { queue: job.queue, type: job.type, outcome, seconds: (performance.now() - t0) / 1000 })
        this.wake()
      }
    })()
  }

  async #beat (): Promise<void> {
    const ids = [...this.#running.values()].map(r => ({ id: r.job.id, lease: r.job.lease! }))
    await heartbeat(this.#o.pool, ids).catch(err => this.#o.log.warn({ err }, 'heartbeat failed'))
  }

  async #rescue (): Promise<void> {
    try {
      const scope = { queues: Object.keys(this.#o.queues), types: [...this.#types.values()].map(t => ({ type: t.type, idempotent: t.idempotent })) }
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

  /** Stop claiming; let running jobs finish for up to graceMs, then abort and release them. */
  async drain (graceMs = 10_000): Promise<void> {
    this.#draining = true
    for (const t of this.#timers) clearInterval(t)
    await this.#cycle
    const all = Promise.all([...this.#running.values()].map(r => r.done))
    const timedOut = await Promise.race([all.then(() => false), new Promise<boolean>(r => setTimeout(() => r(true), graceMs).unref())])
    if (timedOut) {
      for (const r of this.#running.values()) r.ac.abort(new Error('worker draining'))
      await all
    }
    await this.#listener?.end().catch(() => {})
  }
}
