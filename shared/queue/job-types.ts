// The queue's names and what a job type declares, shared by the lanes that
// enqueue and own job types (services/<lane>/jobs) and the worker that runs
// them. `idempotent` decides what zombie rescue may do with a job whose worker
// vanished mid-run: re-run it, or dead-letter it.
import type pg from 'pg'
import type { LaneName } from '../lanes.ts'
import type { Job } from './types.ts'
import type { DependencyBreaker } from '../breaker.ts'

/** The queues (rows of jobs.queues, created by migration 0005_jobs.sql). */
export const QUEUES = Object.freeze({
  fraudAsync: 'fraud-async',
  taxReconcile: 'tax-reconcile',
} as const)

/** Every job type's name: the lanes' own, then the worker's built-ins (operations and benchmarks). */
export const JOB_NAMES = Object.freeze({
  fraudScore: 'fraud.score',
  taxReconcile: 'tax.reconcile',
  noop: 'noop',
  sleep: 'sleep',
  sleepOnce: 'sleep-once',
} as const)

export type JobName = typeof JOB_NAMES[keyof typeof JOB_NAMES]

/** Where a lane's job types log what is not a job's own result (a breaker's transitions). */
export interface JobLog { warn (o: object, m: string): void, info (o: object, m: string): void }

export interface JobContext {
  readonly signal: AbortSignal
  readonly job: Job
  /** The owning lane's pool, connecting as that lane's role (undefined for built-ins). */
  readonly db: pg.Pool | undefined
}

export interface JobType {
  readonly type: JobName
  readonly idempotent: boolean
  /** The lane whose data the job touches: it runs with that lane's role. */
  readonly lane?: LaneName
  run (payload: Record<string, unknown>, ctx: JobContext): Promise<unknown>
  /**
   * While this says true the worker claims no job of `queue`: the job's
   * dependency is known to be down (its breaker is open), and a claimed job
   * could only be put back.
   */
  readonly held?: () => boolean
  readonly queue?: string
  /** Circuit breakers the job's calls go through: in the worker's /status and metrics. */
  readonly breakers?: readonly DependencyBreaker[]
}

/**
 * Throw this when the job could not even try (its dependency's breaker is
 * open): it goes back to the queue after its backoff, the attempt not counted,
 * so waiting out an outage never dead-letters it.
 */
export class DeferJobError extends Error {
  readonly deferred = true
  constructor (message: string) { super(message); this.name = 'DeferJobError' }
}

/** Throw this for a failure that no retry can fix: the job goes straight to jobs_dead. */
export class FatalJobError extends Error {
  readonly fatal = true
  constructor (message: string) { super(message); this.name = 'FatalJobError' }
}
