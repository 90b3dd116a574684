// @fastify/under-pressure on a lane: event-loop delay and utilization, heap,
// RSS, and a DB health check. Its 503 is problem+json ERR_LANE_OVERLOADED with
// Retry-After, counted as an `under_pressure` rejection.
import underPressure from '@fastify/under-pressure'
import type { FastifyInstance } from 'fastify'
import { AppError } from '../errors.ts'
import { problemReply } from '../problem.ts'
import type { LaneKit } from './build-lane-app.ts'

export interface DbHealth { ok (): boolean, lastError (): string | undefined }

export async function registerPressure (app: FastifyInstance, kit: LaneKit, intervalMs: number): Promise<DbHealth> {
  let lastError: string | undefined
  let ok = true
  // When every connection is busy serving requests the DB is plainly reachable:
  // the check must not queue behind them or add to them.
  const check = async (): Promise<boolean> => {
    const p = kit.pool
    if (p.idleCount === 0 && p.totalCount >= kit.limits.db.poolMax) return ok
    try {
      await Promise.race([
        p.query('select 1'),
        new Promise((_r, reject) => setTimeout(() => reject(new Error('db health check timed out')), Math.min(1_000, intervalMs)).unref()),
      ])
      lastError = undefined
      ok = true
    } catch (err) {
      lastError = (err as Error).message
      ok = false
    }
    return ok
  }
  await app.register(underPressure, {
    maxEventLoopDelay: kit.limits.pressure.maxEventLoopDelayMs,
    maxEventLoopUtilization: kit.limits.pressure.maxEventLoopUtilization,
    maxHeapUsedBytes: kit.limits.pressure.maxHeapUsedBytes,
    maxRssBytes: kit.limits.pressure.maxRssBytes,
    healthCheck: check,
    healthCheckInterval: intervalMs,
    retryAfter: 5,
    pressureHandler: (_req, reply, type) => {
      kit.metrics.rejection('under_pressure')
      // under-pressure sends what the handler returns; returning nothing would let the request through.
      // (its types say void, its code sends any non-null value: index.js handlePressure)
      return problemReply(reply, new AppError('ERR_LANE_OVERLOADED', { detail: `lane ${kit.limits.lane} is under pressure (${type})` })) as unknown as void
    },
  })
  return { ok: () => ok, lastError: () => lastError }
}
