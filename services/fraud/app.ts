import type { FastifyServerOptions } from 'fastify'
import type { LaneLimits } from '../../shared/lanes.ts'
import { buildLaneApp } from '../../shared/lane-kit/build-lane-app.ts'
import { fraudRoutes } from './routes.ts'
import { weightsFromEnv } from './scoring.ts'

export function buildApp (cfg: { limits: LaneLimits, databaseUrl: string, logger?: FastifyServerOptions['logger'] }) {
  return buildLaneApp({ ...cfg, routes: fraudRoutes(weightsFromEnv()) })
}
