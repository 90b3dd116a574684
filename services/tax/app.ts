import type { FastifyServerOptions } from 'fastify'
import type { LaneLimits } from '../../shared/lanes.ts'
import { buildLaneApp } from '../../shared/lane-kit/build-lane-app.ts'
import { createUpstreamPool } from '../../shared/lane-kit/http.ts'
import { taxRoutes } from './routes.ts'
import { compensationSource } from './compensation/certificate.ts'
import { compensationWriter } from './store-quote.ts'
import { logTransition, providerBreaker, type TaxBreakerConfig } from './breaker.ts'

export interface TaxConfig {
  limits: LaneLimits
  databaseUrl: string
  providerUrl: string
  /** Well under the 10 s hard cap: see docs/operations.md, "Tax quote deadline". */
  quoteDeadlineMs: number
  compensation: { tableFile: string, certificateFile: string, maxAgeMs: number }
  breaker: TaxBreakerConfig
  logger?: FastifyServerOptions['logger']
}

export async function buildApp (cfg: TaxConfig) {
  const provider = createUpstreamPool(cfg.providerUrl, cfg.limits, { timeoutMs: cfg.quoteDeadlineMs })
  const compensation = compensationSource(cfg.compensation)
  const log = { warn: (o: object, m: string) => built.app.log.warn(o, m) }
  const writer = compensationWriter(cfg.databaseUrl, log, cfg.limits.db.commitDelayMs)
  const breaker = providerBreaker(cfg.breaker, provider, t => {
    logTransition(built.app.log, t)
    // MC-RT-01's recovery is measured from the provider's return: the probe that closed the breaker.
    if (t.to === 'open') built.kit.recovery.dependencyFailed('provider')
    if (t.to === 'closed') built.kit.recovery.dependencyOk('provider')
    // worker-tax reads it from this replica's row: written now, not at the next heartbeat.
    built.kit.share.announce()
  }, { caller: 'tax' })
  const routes = taxRoutes({ provider, quoteDeadlineMs: cfg.quoteDeadlineMs, compensation, writer, breaker })
  const built = await buildLaneApp({ ...cfg, routes })
  built.app.addHook('onClose', async () => { compensation.close(); await writer.close(); await provider.destroy() })
  built.app.get('/compensation', async () => compensation.status())
  writer.warm()
  return built
}
