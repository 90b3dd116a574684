import { buildLaneApp, type LaneAppConfig } from '../../shared/lane-kit/build-lane-app.ts'
import { fraudRoutes } from './routes.ts'
import { weightsFromEnv } from './scoring.ts'

export function buildApp (cfg: LaneAppConfig) {
  return buildLaneApp({ ...cfg, routes: fraudRoutes(weightsFromEnv()) })
}
