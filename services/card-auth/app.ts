import { buildLaneApp, type LaneAppConfig } from '../../shared/lane-kit/build-lane-app.ts'
import { cardAuthRoutes } from './routes.ts'

export function buildApp (cfg: LaneAppConfig) {
  return buildLaneApp({ ...cfg, routes: cardAuthRoutes })
}
