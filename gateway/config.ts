// The gateway's environment, validated at boot (main.ts); docs/operations.md
// "Gateway" lists it, held to it by test/config-docs.test.ts.
import { Type } from 'typebox'
import { PRESSURE_SCHEMA_PROPERTIES as PRESSURE } from '../shared/pressure-config.ts'
import { RETRY_GUARD_DEFAULTS } from './retry-guard.ts'
import { BALANCING_DEFAULTS } from './upstreams.ts'

export const GATEWAY_ENV = Type.Object({
  GATEWAY_PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8080 }),
  GATEWAY_HOST: Type.String({ default: '0.0.0.0' }),
  // Connections the kernel holds for the gateway before it accepts them (capped by net.core.somaxconn).
  GATEWAY_LISTEN_BACKLOG: Type.Integer({ default: 4_096, minimum: 1, maximum: 65_535 }),
  API_KEYS_FILE: Type.String({ default: '.data/api-keys.json' }),
  CARD_AUTH_URL: Type.String({ default: 'http://127.0.0.1:8101', pattern: '^https?://' }),
  FRAUD_URL: Type.String({ default: 'http://127.0.0.1:8102', pattern: '^https?://' }),
  TAX_URL: Type.String({ default: 'http://127.0.0.1:8103', pattern: '^https?://' }),
  // Lane replicas (gateway/replica-set.ts): names re-resolved, replicas checked, ejected, ramped.
  GATEWAY_RESOLVE_MS: Type.Integer({ default: BALANCING_DEFAULTS.resolveEveryMs, minimum: 100, maximum: 600_000 }),
  GATEWAY_HEALTH_CHECK_MS: Type.Integer({ default: BALANCING_DEFAULTS.checkEveryMs, minimum: 100, maximum: 600_000 }),
  GATEWAY_EJECT_MS: Type.Integer({ default: BALANCING_DEFAULTS.ejectMs, minimum: 0, maximum: 600_000 }),
  GATEWAY_EJECT_MAX_MS: Type.Integer({ default: BALANCING_DEFAULTS.ejectMaxMs, minimum: 0, maximum: 3_600_000 }),
  GATEWAY_SLOW_START_MS: Type.Integer({ default: BALANCING_DEFAULTS.slowStartMs, minimum: 0, maximum: 600_000 }),
  // Authorizations the gateway sends itself, rolled back by card-auth, before it
  // reports ready (gateway/warm-up.ts); 0: none.
  GATEWAY_WARM_UP_REQUESTS: Type.Integer({ default: 2_000, minimum: 0, maximum: 100_000 }),
  // How long the warm-up waits for a ready card-auth replica before the gateway turns ready cold.
  GATEWAY_WARM_UP_WAIT_MS: Type.Integer({ default: 30_000, minimum: 0, maximum: 600_000 }),
  // Every process's under-pressure limits (shared/pressure-config.ts), but the
  // gateway queues for every lane: it sheds on a shorter event-loop delay, and
  // that check cannot be turned off.
  GATEWAY_PRESSURE_MAX_EVENT_LOOP_DELAY_MS: Type.Integer({ default: 500, minimum: 10, maximum: 600_000 }),
  GATEWAY_PRESSURE_MAX_HEAP_BYTES: PRESSURE.PRESSURE_MAX_HEAP_BYTES,
  GATEWAY_PRESSURE_MAX_RSS_BYTES: PRESSURE.PRESSURE_MAX_RSS_BYTES,
  // Shed answers' internal timings (Server-Timing) passed to clients: for drills
  // and benchmarks, off for the public API.
  GATEWAY_SERVER_TIMING: Type.Union([Type.Literal('off'), Type.Literal('on')], { default: 'off' }),
  // A caller's W3C traceparent, when tracing is on (shared/tracing.ts): continued,
  // or a new trace linked to it (callers not trusted with the fleet's traces).
  GATEWAY_TRACEPARENT: Type.Union([Type.Literal('continue'), Type.Literal('restart')], { default: 'continue' }),
  // The retry guard's counters in Redis, shared by every gateway replica
  // (gateway/guard-store.ts); empty: in this process only.
  REDIS_URL: Type.String({ default: '', pattern: '^(rediss?://.+)?$' }),
  // The most a request waits on that store before this replica decides alone (ms).
  RETRY_STORE_BUDGET_MS: Type.Integer({ default: 5, minimum: 1, maximum: 1_000 }),
  // How many gateway replicas share the limits: while the store is out each enforces 1/N of each.
  GATEWAY_REPLICAS: Type.Integer({ default: 1, minimum: 1, maximum: 1_000 }),
  RETRY_PER_KEY_ATTEMPTS: Type.Integer({ default: RETRY_GUARD_DEFAULTS.perKeyAttempts, minimum: 1, maximum: 100 }),
  RETRY_WINDOW_MS: Type.Integer({ default: RETRY_GUARD_DEFAULTS.windowMs, minimum: 100, maximum: 3_600_000 }),
  RETRY_BUDGET_RATIO: Type.Number({ default: RETRY_GUARD_DEFAULTS.budgetRatio, minimum: 0, maximum: 1 }),
  RETRY_BUDGET_FLOOR: Type.Integer({ default: RETRY_GUARD_DEFAULTS.budgetFloor, minimum: 0, maximum: 1_000_000 }),
  CLIENT_RATE_MAX: Type.Integer({ default: RETRY_GUARD_DEFAULTS.clientRateMax, minimum: 1, maximum: 10_000_000 }),
  CLIENT_RATE_WINDOW_MS: Type.Integer({
    default: RETRY_GUARD_DEFAULTS.clientRateWindowMs, minimum: 100, maximum: 3_600_000,
  }),
})
