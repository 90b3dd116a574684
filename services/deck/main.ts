// Bootstrap of the deck: read env, validate, connect as the deck's own role,
// start polling the fleet, listen on loopback, drain on SIGTERM/SIGINT.
import { loadConfig } from '../../shared/config.ts'
import { onShutdown } from '../../shared/lifecycle.ts'
import { loggerOptions } from '../../shared/http-app.ts'
import { DECK_ROLE, LANE_NAMES, deckRoleName, envPrefix, laneLimits, laneUrl } from '../../shared/lanes.ts'
import { assertRole, createRolePool } from '../../shared/db/pool.ts'
import { deckRoleBudget, StartBudget } from '../../shared/db/start-wait.ts'
import { failStart } from '../../shared/start-failure.ts'
import { pressureLimits } from '../../shared/pressure-config.ts'
import { buildDeckApp } from './app.ts'
import { DECK_ENV } from './config.ts'
import { Collector, type Target } from './collector.ts'

const cfg = loadConfig(DECK_ENV, process.env)
// DECK_PRESSURE_MAX_EVENT_LOOP_DELAY_MS / _UTILIZATION / _HEAP_BYTES / _RSS_BYTES
const pressure = pressureLimits('DECK_')
if (cfg.DECK_TARGET_TIMEOUT_MS > cfg.DECK_POLL_MS) {
  console.error(JSON.stringify({ level: 'fatal', code: 'ERR_CONFIG_INVALID', msg: 'DECK_TARGET_TIMEOUT_MS must not exceed DECK_POLL_MS' }))
  process.exit(1)
}

const targets: Target[] = [
  ...LANE_NAMES.map(n => ({ name: n, kind: 'lane' as const, url: (cfg as Record<string, unknown>)[`${envPrefix(n)}URL`] as string | undefined ?? laneUrl(laneLimits(n)) })),
  ...(cfg.GATEWAY_URL ? [{ name: 'gateway', kind: 'gateway' as const, url: cfg.GATEWAY_URL }] : []),
  ...cfg.WORKER_URLS.split(',').filter(Boolean).map(p => { const [name, url] = p.split('=') as [string, string]; return { name, kind: 'worker' as const, url } }),
  ...(cfg.TAX_SANDBOX_URL ? [{ name: 'tax-sandbox', kind: 'sandbox' as const, url: cfg.TAX_SANDBOX_URL }] : []),
]

const pool = createRolePool(cfg.DATABASE_URL, { max: DECK_ROLE.poolMax, applicationName: 'watertight-deck', leakDetectionMs: cfg.DECK_LEAK_DETECTION_MS })
const collector = new Collector({
  targets, pollMs: cfg.DECK_POLL_MS, timeoutMs: cfg.DECK_TARGET_TIMEOUT_MS, historySeconds: cfg.DECK_HISTORY_SECONDS,
})
const app = buildDeckApp({ adminToken: cfg.ADMIN_TOKEN, pool, collector, sandboxUrl: cfg.TAX_SANDBOX_URL, pressure, logger: loggerOptions('deck') })
app.addHook('onClose', async () => { await collector.stop(); await pool.end() })
try {
  await assertRole(pool, deckRoleName(), new StartBudget({ name: 'deck', log: app.log }).for(deckRoleBudget(deckRoleName())))
  collector.start()
  await app.listen({ port: cfg.DECK_PORT, host: cfg.DECK_HOST })
} catch (err) {
  await app.close().catch(() => {})
  failStart('deck', err)
}
onShutdown(app.log, () => app.close())
