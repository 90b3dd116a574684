// Built-in job types of every worker, for operations and benchmarks:
//  - `noop`: does nothing (queue throughput);
//  - `sleep`: waits payload.ms (a slow job), optionally failing its first
//    payload.failAttempts attempts (retry drills) or failing fatally.
//  - `sleep-once`: like `sleep`, but declared non-idempotent, so a rescued
//    zombie of it is dead-lettered, never re-run (rescue drills).
import { FatalJobError, JOB_NAMES, type JobType } from '../../shared/queue/job-types.ts'

const sleep: JobType['run'] = async (p, ctx) => {
  const ms = Math.max(0, Math.min(600_000, Number(p.ms ?? 0)))
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(resolve, ms)
    ctx.signal.addEventListener('abort', () => { clearTimeout(t); reject(new Error('aborted')) }, { once: true })
  })
  if (p.fatal) throw new FatalJobError('sleep job asked to fail fatally')
  if (ctx.job.attempts <= Number(p.failAttempts ?? 0)) throw new Error(`sleep job failing attempt ${ctx.job.attempts}`)
  return { sleptMs: ms }
}

export const BUILTIN_JOBS: readonly JobType[] = Object.freeze([
  { type: JOB_NAMES.noop, idempotent: true, run: async () => null },
  { type: JOB_NAMES.sleep, idempotent: true, run: sleep },
  { type: JOB_NAMES.sleepOnce, idempotent: false, run: sleep },
] satisfies JobType[])
