import { loadConfig } from '../shared/config.ts'
import { onShutdown } from '../shared/lifecycle.ts'
import { loggerOptions } from '../shared/http-app.ts'
import { startTracing } from '../shared/tracing.ts'
import { LANE_NAMES, laneLimits, type LaneLimits, type LaneName } from '../shared/lanes.ts'
import { buildApp } from './app.ts'
import { fileKeySource } from './auth.ts'
import { GATEWAY_ENV } from './config.ts'
import { RETRY_GUARD_DEFAULTS } from './retry-guard.ts'
import { GatewayWarmUp } from './warm-up.ts'
import type { AddressInfo } from 'node:net'

const cfg = loadConfig(GATEWAY_ENV, process.env)
await startTracing('gateway')

const limits = Object.fromEntries(LANE_NAMES.map(n => [n, laneLimits(n)])) as Record<LaneName, LaneLimits>
// An unreadable key file is logged here once per problem, before the app's logger exists.
const keys = fileKeySource(cfg.API_KEYS_FILE, problem => console.error(JSON.stringify({ level: 'error', msg: problem })))
const warmUp = new GatewayWarmUp(cfg.GATEWAY_WARM_UP_REQUESTS)
const { app, upstreams } = await buildApp({
  limits,
  laneUrls: { 'card-auth': cfg.CARD_AUTH_URL, fraud: cfg.FRAUD_URL, tax: cfg.TAX_URL },
  keys,
  retry: {
    ...RETRY_GUARD_DEFAULTS,
    perKeyAttempts: cfg.RETRY_PER_KEY_ATTEMPTS,
    windowMs: cfg.RETRY_WINDOW_MS,
    budgetRatio: cfg.RETRY_BUDGET_RATIO,
    budgetFloor: cfg.RETRY_BUDGET_FLOOR,
    clientRateMax: cfg.CLIENT_RATE_MAX,
    clientRateWindowMs: cfg.CLIENT_RATE_WINDOW_MS,
  },
  balancing: {
    resolveEveryMs: cfg.GATEWAY_RESOLVE_MS,
    checkEveryMs: cfg.GATEWAY_HEALTH_CHECK_MS,
    ejectMs: cfg.GATEWAY_EJECT_MS,
    ejectMaxMs: cfg.GATEWAY_EJECT_MAX_MS,
    slowStartMs: cfg.GATEWAY_SLOW_START_MS,
  },
  maxEventLoopDelayMs: cfg.GATEWAY_PRESSURE_MAX_EVENT_LOOP_DELAY_MS,
  maxHeapUsedBytes: cfg.GATEWAY_PRESSURE_MAX_HEAP_BYTES,
  maxRssBytes: cfg.GATEWAY_PRESSURE_MAX_RSS_BYTES,
  logger: loggerOptions('gateway'),
  warmUp,
  serverTiming: cfg.GATEWAY_SERVER_TIMING === 'on',
  traceparent: cfg.GATEWAY_TRACEPARENT,
  ...(cfg.REDIS_URL === '' ? {} : { sharedStore: { url: cfg.REDIS_URL, budgetMs: cfg.RETRY_STORE_BUDGET_MS, replicas: cfg.GATEWAY_REPLICAS } }),
})
// Node's default backlog is 511: clients opening connections in a burst while the
// gateway is busy overflowed it, and a connection whose SYN was dropped is retried
// by its client's kernel 1, 3, 7 s… later, a stall the gateway never sees.
await app.listen({ port: cfg.GATEWAY_PORT, host: cfg.GATEWAY_HOST, backlog: cfg.GATEWAY_LISTEN_BACKLOG })
// Ready once warm (warm-up.ts), on its own listener over loopback.
const port = (app.server.address() as AddressInfo).port
const host = ['0.0.0.0', '::'].includes(cfg.GATEWAY_HOST) ? '127.0.0.1' : cfg.GATEWAY_HOST
void warmUp.run({
  url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
  waitMs: cfg.GATEWAY_WARM_UP_WAIT_MS,
  cardAuthReady: () => upstreams['card-auth'].replicas.replicas.some(r => r.state === 'ready'),
  log: app.log,
})
onShutdown(app.log, async () => { keys.close(); await app.close() })
