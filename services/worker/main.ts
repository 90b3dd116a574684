// A generic job host: `--queues fraud-async` (or WORKER_QUEUES) serves those
// queues with the job types of the lanes that own them (services/<lane>/jobs/)
// plus the built-ins. It connects as jobs_ds, which owns only the queue schema.
import { existsSync } from 'node:fs'
import path from 'node:path'
import { parseArgs } from 'node:util'
import type pg from 'pg'
import { Type } from 'typebox'
import { loadConfig } from '../../shared/config.ts'
import { GRACE_MS, onShutdown } from '../../shared/lifecycle.ts'
import { loggerOptions } from '../../shared/http-app.ts'
import { jobsRoleName, LANE_NAMES, LANE_QUEUES, envPrefix, laneLimits, type LaneName } from '../../shared/lanes.ts'
import { assertRole, createRolePool } from '../../shared/db/pool.ts'
import { jobsRoleBudget, StartBudget, workerLaneRoleBudget } from '../../shared/db/start-wait.ts'
import { pressureLimits } from '../../shared/pressure-config.ts'
import { buildApp } from './app.ts'
import { WORKER_ENV } from './config.ts'
import { BUILTIN_JOBS } from './builtin-jobs.ts'
import type { JobLog, JobType } from '../../shared/queue/job-types.ts'
import { Worker } from './runner.ts'
import { failStart } from '../../shared/start-failure.ts'
import { treePath } from '../../shared/tree.ts'
import { startTracing } from '../../shared/tracing.ts'

const cfg = loadConfig(WORKER_ENV, process.env)
await startTracing('worker')
// WORKER_PRESSURE_MAX_EVENT_LOOP_DELAY_MS / _UTILIZATION / _HEAP_BYTES / _RSS_BYTES
const pressure = pressureLimits('WORKER_')
const { values } = parseArgs({ options: { queues: { type: 'string' } }, strict: false })
const queueNames = String(values.queues ?? cfg.WORKER_QUEUES).split(',').map(s => s.trim()).filter(Boolean)
if (queueNames.length === 0) { console.error('worker: no queues (--queues a,b or WORKER_QUEUES)'); process.exit(2) }
// One budget for the whole start: each role's pool, then the LISTEN connection.
const start = new StartBudget({ name: 'worker', ms: cfg.WORKER_START_BUDGET_MS, variable: 'WORKER_START_BUDGET_MS' })

// The only import of lane code from outside a lane: the job types of the lanes that own these queues.
const types: JobType[] = [...BUILTIN_JOBS]
const lanePools: Partial<Record<LaneName, pg.Pool>> = {}
for (const lane of LANE_NAMES) {
  if (!LANE_QUEUES[lane].some(q => queueNames.includes(q))) continue
  // .ts from source (tsx), .js once compiled (the container image).
  const file = treePath(`services/${lane}/jobs/index${path.extname(import.meta.filename)}`)
  if (!existsSync(file)) continue
  // Their logs go to the app's logger, built below, once they have something to say.
  const mod = (await import(file)) as { jobTypes: (o: { log: JobLog, laneDb: () => pg.Pool | undefined }) => JobType[] }
  // A bad value of the lane's job settings (TAX_RECONCILE_*, TAX_BREAKER_*) is one line, not a stack.
  // laneDb: the lane's pool below, made once the job types have read their settings.
  const log: JobLog = { warn: (o, m) => app.log.warn(o, m), info: (o, m) => app.log.info(o, m) }
  try { types.push(...mod.jobTypes({ log, laneDb: () => lanePools[lane] })) } catch (err) { failStart('worker', err) }
  // The lane's jobs run with the lane's own role, on the share of its CONNECTION
  // LIMIT reserved for the worker, so async work cannot exceed the lane's budget.
  const urlVar = `${envPrefix(lane)}DATABASE_URL`
  const schema = Type.Object({ [urlVar]: Type.Optional(Type.String({ minLength: 1 })) })
  const url = (loadConfig(schema, process.env) as Record<string, string | undefined>)[urlVar]
  if (!url) { console.error(`worker: ${urlVar} (the ${lane} role) is required for ${lane} jobs`); process.exit(2) }
  const limits = laneLimits(lane)
  const max = Math.max(1, limits.db.workerPoolMax)
  lanePools[lane] = createRolePool(url, { max, applicationName: `watertight-worker-${lane}`, leakDetectionMs: limits.db.leakDetectionMs })
  await assertRole(lanePools[lane]!, limits.db.role, start.for(workerLaneRoleBudget(limits, max)))
}

// This process's share of the role's limit, less one for the LISTEN connection.
const poolMax = cfg.WORKER_POOL_MAX ?? Math.max(1, Math.floor(cfg.JOBS_POOL_MAX / cfg.WORKER_REPLICAS) - 1)
const pool = createRolePool(cfg.DATABASE_URL, { max: poolMax, applicationName: 'watertight-worker', leakDetectionMs: cfg.WORKER_LEAK_DETECTION_MS })
const jobsStart = start.for(jobsRoleBudget({
  role: jobsRoleName(), limit: cfg.JOBS_POOL_MAX, replicas: cfg.WORKER_REPLICAS, poolMax,
}))
await assertRole(pool, jobsRoleName(), jobsStart)
const logger = loggerOptions(`worker-${queueNames.join('+')}`)
const worker = new Worker({
  pool,
  databaseUrl: cfg.DATABASE_URL,
  startRetry: jobsStart,
  queues: Object.fromEntries(queueNames.map(q => [q, cfg.WORKER_SLOTS])),
  types,
  lanePools,
  pollMs: cfg.WORKER_POLL_MS,
  heartbeatMs: cfg.WORKER_HEARTBEAT_MS,
  rescueMs: cfg.WORKER_RESCUE_MS,
  backoff: { baseMs: cfg.WORKER_BACKOFF_BASE_MS, capMs: cfg.WORKER_BACKOFF_CAP_MS },
  vacuum: { everyJobs: cfg.WORKER_VACUUM_EVERY_JOBS, minMs: cfg.WORKER_VACUUM_MIN_MS },
  log: { info: () => {}, warn: (o, m) => app.log.warn(o, m), error: (o, m) => app.log.error(o, m) },
})
pool.on('error', err => app.log.error({ err }, 'idle pg client error'))
const app = buildApp({
  worker,
  pool,
  breakers: types.flatMap(t => t.breakers ?? []),
  lanePools: Object.values(lanePools) as pg.Pool[],
  pressure,
  logger,
})
await worker.start()
await app.listen({ port: cfg.WORKER_PORT, host: cfg.WORKER_HOST })
app.log.info({ workerId: worker.id, queues: queueNames, types: types.map(t => t.type) }, 'worker started')

// Running jobs get most of the grace period to finish; what is left is aborted
// and released (rescue re-runs it) before the process exits.
onShutdown(app.log, async () => {
  await worker.drain(GRACE_MS - 3_000)
  await app.close()
  await Promise.all([pool.end(), ...Object.values(lanePools).map(p => p!.end())])
})
