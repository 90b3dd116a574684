import { buildLaneApp, type LaneAppConfig } from '../../shared/lane-kit/build-lane-app.ts'
import { fraudRoutes } from './routes.ts'
import { weightsFromEnv } from './scoring.ts'
import { screeningWriter } from './overflow.ts'

export async function buildApp (cfg: LaneAppConfig) {
  const log = { warn: (o: object, m: string) => built.app.log.warn(o, m) }
  const writer = screeningWriter(cfg.databaseUrl, log, cfg.limits.db.commitDelayMs)
  const built = await buildLaneApp({ ...cfg, routes: fraudRoutes(weightsFromEnv(), writer) })
  built.app.addHook('onClose', async () => { await writer.close() })
  writer.warm()
  return built
}
