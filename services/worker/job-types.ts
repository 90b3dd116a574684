// What a job type declares. `idempotent` decides what zombie rescue may do with
// a job whose worker vanished mid-run: re-run it, or dead-letter it.
import type pg from 'pg'
import type { LaneName } from '../../shared/lanes.ts'
import type { Job } from '../../shared/queue/types.ts'

export interface JobContext {
  readonly signal: AbortSignal
  readonly job: Job
  /** The owning lane's pool, connecting as that lane's role (undefined for built-ins). */
  readonly db: pg.Pool | undefined
}

export interface JobType {
  readonly type: string
  readonly idempotent: boolean
  /** The lane whose data the job touches: it runs with that lane's role. */
  readonly lane?: LaneName
  run (payload: Record<string, unknown>, ctx: JobContext): Promise<unknown>
}

/** Throw this for a failure that no retry can fix: the job goes straight to jobs_dead. */
export class FatalJobError extends Error {
  readonly fatal = true
  constructor (message: string) { super(message); this.name = 'FatalJobError' }
}
