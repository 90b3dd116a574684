import { buildLaneApp, type LaneAppConfig } from '../../shared/lane-kit/build-lane-app.ts'
import { authorizeWriter } from './authorize-writer.ts'
import { cardAuthRoutes } from './routes.ts'

export async function buildApp (cfg: LaneAppConfig) {
  const log = { warn: (o: object, m: string) => built.app.log.warn(o, m) }
  const writer = authorizeWriter(cfg.databaseUrl, log, cfg.limits.db.commitDelayMs)
  const built = await buildLaneApp({ ...cfg, routes: cardAuthRoutes(writer) })
  built.app.addHook('onClose', async () => { await writer.close() })
  writer.warm()
  return built
}
