// The health check of every process but the gateway (which registers its own):
// a small plugin around @fastify/under-pressure, the platformatic habit.
// Event-loop delay and utilization, heap and RSS limits, plus a DB reachability
// check where the process has a pool. Past a limit, every route that is not
// marked PRESSURE_EXEMPT answers 503 ERR_LANE_OVERLOADED with Retry-After and
// the RateLimit fields, so a client backs off instead of queueing on a process
// that is already behind.
import underPressure from '@fastify/under-pressure'
import type { FastifyBaseLogger, FastifyInstance } from 'fastify'
import fp from 'fastify-plugin'
import type pg from 'pg'
import { poolCounts } from './db/pool.ts'
import { AppError, ERRORS } from './errors.ts'
import type { PressureLimits } from './pressure-config.ts'
import { problemReply } from './problem.ts'
import { rateLimitFields } from './rate-limit-fields.ts'

export interface DbHealth { ok (): boolean, lastError (): string | undefined }

export interface HealthCheckOptions {
  /** Who sheds: the problem detail and the RateLimit policy (`<name>-pressure`) name it. */
  name: string
  limits: PressureLimits
  db?: {
    /** The pool to check (a function: a lane's pool can be replaced). */
    pool: pg.Pool | (() => pg.Pool)
    /**
     * Whether losing the database sheds the process's routes (default true).
     * Either way it is checked and reported (app.dbHealth, /health/ready).
     */
    shed?: boolean
  }
  /** How often the DB check runs (ms). */
  intervalMs?: number
  /** Called for each request shed, with under-pressure's reason. */
  onShed?: (type: string) => void
}

/** Route config of the routes that must answer under pressure: a probe or a scraper needs the truth then most. */
export const PRESSURE_EXEMPT = Object.freeze({ pressureHandler: () => undefined })

const RETRY_AFTER_S = ERRORS.ERR_LANE_OVERLOADED.retryAfter
const SAMPLE_MS = 1_000
// The first sample covers start-up (schema compilation, first connections),
// not load: in a test on a loaded 2-core host a deck just started shed its
// first requests. Shedding starts from the second sample.
const WARM_UP_MS = 2 * SAMPLE_MS

/** A DB check that never queues behind a busy pool: when every connection is in use, the DB is plainly reachable. */
function dbCheck (poolOf: () => pg.Pool, timeoutMs: number): DbHealth & { run (): Promise<boolean> } {
  let ok = true
  let lastError: string | undefined
  return {
    ok: () => ok,
    lastError: () => lastError,
    async run () {
      const pool = poolOf()
      const c = poolCounts(pool)
      if (c.idle === 0 && c.total >= c.max) return ok
      try {
        // query_timeout, not a race beside the query: a query that never answers (a
        // black-holed connection) then fails, and the pool discards its connection
        // instead of leaving it checked out forever (the check would otherwise take
        // every connection of the pool, one per interval, and report down for good).
        await pool.query({ text: 'select 1', query_timeout: timeoutMs } as pg.QueryConfig)
        lastError = undefined
        ok = true
      } catch (err) {
        lastError = (err as Error).message
        ok = false
      }
      return ok
    },
  }
}

/** At most one line per Retry-After window, so shedding cannot flood the log. */
function shedLog (name: string, memory: () => unknown) {
  let lastAt = 0
  let since = 0
  return (log: FastifyBaseLogger, type: string, value: unknown): void => {
    since++
    const now = Date.now()
    if (now - lastAt < RETRY_AFTER_S * 1000) return
    log.warn({ type, value, shed: since, pressure: memory() }, `${name} under pressure: shedding`)
    lastAt = now
    since = 0
  }
}

async function healthCheck (app: FastifyInstance, o: HealthCheckOptions): Promise<void> {
  const intervalMs = o.intervalMs ?? 2_000
  const given = o.db?.pool
  const db = given ? { ...dbCheck(typeof given === 'function' ? given : () => given, Math.min(1_000, intervalMs)), shed: o.db!.shed ?? true } : undefined
  // The one policy a shed answer names: nothing is admitted until the pressure
  // clears, and the next sample is due within the Retry-After.
  const fields = rateLimitFields({ name: `${o.name}-pressure`, quota: 0, windowSeconds: RETRY_AFTER_S, resetSeconds: RETRY_AFTER_S })
  const log = shedLog(o.name, () => app.memoryUsage())
  const warmUntil = Date.now() + WARM_UP_MS
  await app.register(underPressure, {
    sampleInterval: SAMPLE_MS,
    maxEventLoopDelay: o.limits.maxEventLoopDelayMs,
    maxEventLoopUtilization: o.limits.maxEventLoopUtilization,
    maxHeapUsedBytes: o.limits.maxHeapUsedBytes,
    maxRssBytes: o.limits.maxRssBytes,
    ...(db ? { healthCheck: async () => (await db.run()) || !db.shed, healthCheckInterval: intervalMs } : {}),
    retryAfter: RETRY_AFTER_S,
    pressureHandler: (req, reply, type, value) => {
      if (Date.now() < warmUntil) return undefined
      o.onShed?.(type)
      log(req.log, type, value)
      // under-pressure sends what the handler returns (synchronously); returning
      // nothing lets the request through (its types say void, its code sends
      // any non-null value: index.js handlePressure).
      return problemReply(reply, new AppError('ERR_LANE_OVERLOADED', { detail: `${o.name} is under pressure (${type})`, ...fields })) as unknown as void
    },
  })
  app.decorate('dbHealth', db ? { ok: db.ok, lastError: db.lastError } satisfies DbHealth : null)
}

export default fp(healthCheck, { name: 'watertight-health-check', fastify: '5.x' })

declare module 'fastify' {
  interface FastifyInstance {
    /** The DB check's last result; null for a process without a database. */
    dbHealth: DbHealth | null
  }
}
