// The shared health check (shared/health-check.ts) on a lane: its limits come
// from the lane table, its DB check from the lane's pool, and a shed request is
// counted as an `under_pressure` rejection of the lane.
import type { FastifyInstance } from 'fastify'
import healthCheck, { type DbHealth } from '../health-check.ts'
import type { LaneKit } from './build-lane-app.ts'

export type { DbHealth } from '../health-check.ts'

export async function registerPressure (app: FastifyInstance, kit: LaneKit, intervalMs: number): Promise<DbHealth> {
  await app.register(healthCheck, {
    name: kit.limits.lane,
    limits: kit.limits.pressure,
    db: { pool: () => kit.pool },
    intervalMs,
    onShed: () => kit.metrics.rejection('under_pressure'),
  })
  return app.dbHealth!
}
