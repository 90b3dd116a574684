import { Type } from 'typebox'
import { loadConfig } from '../shared/config.ts'
import { onShutdown } from '../shared/lifecycle.ts'
import { loggerOptions } from '../shared/http-app.ts'
import { LANE_NAMES, laneLimits, type LaneLimits, type LaneName } from '../shared/lanes.ts'
import { buildApp } from './app.ts'
import { fileKeySource } from './auth.ts'
import { RETRY_GUARD_DEFAULTS } from './retry-guard.ts'

const cfg = loadConfig(Type.Object({
  GATEWAY_PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
  GATEWAY_HOST: Type.String({ default: '0.0.0.0' }),
  API_KEYS_FILE: Type.String({ default: '.data/api-keys.json' }),
  CARD_AUTH_URL: Type.String({ default: 'http://127.0.0.1:8101', pattern: '^https?://' }),
  FRAUD_URL: Type.String({ default: 'http://127.0.0.1:8102', pattern: '^https?://' }),
  TAX_URL: Type.String({ default: 'http://127.0.0.1:8103', pattern: '^https?://' }),
  GATEWAY_PRESSURE_MAX_EVENT_LOOP_DELAY_MS: Type.Integer({ default: 500, minimum: 10, maximum: 600_000 }),
  GATEWAY_PRESSURE_MAX_HEAP_BYTES: Type.Integer({ default: 1_536 * 1024 * 1024, minimum: 0, maximum: 2 ** 48 }),
  GATEWAY_PRESSURE_MAX_RSS_BYTES: Type.Integer({ default: 2_048 * 1024 * 1024, minimum: 0, maximum: 2 ** 48 }),
  RETRY_PER_KEY_ATTEMPTS: Type.Integer({ default: RETRY_GUARD_DEFAULTS.perKeyAttempts, minimum: 1, maximum: 100 }),
  RETRY_WINDOW_MS: Type.Integer({ default: RETRY_GUARD_DEFAULTS.windowMs, minimum: 100, maximum: 3_600_000 }),
  RETRY_BUDGET_RATIO: Type.Number({ default: RETRY_GUARD_DEFAULTS.budgetRatio, minimum: 0, maximum: 1 }),
  RETRY_BUDGET_FLOOR: Type.Integer({ default: RETRY_GUARD_DEFAULTS.budgetFloor, minimum: 0, maximum: 1_000_000 }),
  CLIENT_RATE_MAX: Type.Integer({ default: RETRY_GUARD_DEFAULTS.clientRateMax, minimum: 1, maximum: 10_000_000 }),
  CLIENT_RATE_WINDOW_MS: Type.Integer({ default: RETRY_GUARD_DEFAULTS.clientRateWindowMs, minimum: 100, maximum: 3_600_000 }),
}), process.env)

const limits = Object.fromEntries(LANE_NAMES.map(n => [n, laneLimits(n)])) as Record<LaneName, LaneLimits>
const keys = fileKeySource(cfg.API_KEYS_FILE)
const { app } = await buildApp({
  limits,
  laneUrls: { 'card-auth': cfg.CARD_AUTH_URL, fraud: cfg.FRAUD_URL, tax: cfg.TAX_URL },
  keys,
  retry: {
    ...RETRY_GUARD_DEFAULTS,
    perKeyAttempts: cfg.RETRY_PER_KEY_ATTEMPTS, windowMs: cfg.RETRY_WINDOW_MS, budgetRatio: cfg.RETRY_BUDGET_RATIO,
    budgetFloor: cfg.RETRY_BUDGET_FLOOR, clientRateMax: cfg.CLIENT_RATE_MAX, clientRateWindowMs: cfg.CLIENT_RATE_WINDOW_MS,
  },
  maxEventLoopDelayMs: cfg.GATEWAY_PRESSURE_MAX_EVENT_LOOP_DELAY_MS,
  maxHeapUsedBytes: cfg.GATEWAY_PRESSURE_MAX_HEAP_BYTES,
  maxRssBytes: cfg.GATEWAY_PRESSURE_MAX_RSS_BYTES,
  logger: loggerOptions('gateway'),
})
await app.listen({ port: cfg.GATEWAY_PORT, host: cfg.GATEWAY_HOST })
onShutdown(app.log, async () => { keys.close(); await app.close() })
