// The tax lane's own environment (beside TAX_* of the lane table), validated at
// boot (main.ts); docs/operations.md "Tax lane" lists it, held to it by
// test/config-docs.test.ts.
import { Type } from 'typebox'
import { DEFAULT_TABLE_FILE } from './compensation/table.ts'

/**
 * The provider's circuit breaker (shared/breaker.ts), read by the lane and by
 * worker-tax, each with a breaker of its own. Defaults: opened when half of the
 * last 20 calls (at least 10) failed or took over 1 s, half the quote deadline,
 * when a healthy provider answers in milliseconds; probed 3 s later, so a
 * provider that heals is used again within the spec's 5 s recovery bound.
 */
export const TAX_BREAKER_ENV = {
  TAX_BREAKER: Type.Union([Type.Literal('on'), Type.Literal('off')], { default: 'on' }),
  TAX_BREAKER_FAILURE_RATE: Type.Number({ default: 0.5, exclusiveMinimum: 0, exclusiveMaximum: 1 }),
  TAX_BREAKER_WINDOW_CALLS: Type.Integer({ default: 20, minimum: 1, maximum: 10_000 }),
  TAX_BREAKER_MIN_CALLS: Type.Integer({ default: 10, minimum: 1, maximum: 10_000 }),
  TAX_BREAKER_SLOW_CALL_MS: Type.Integer({ default: 1_000, minimum: 1, maximum: 10_000 }),
  TAX_BREAKER_HALF_OPEN_AFTER_MS: Type.Integer({ default: 3_000, minimum: 10, maximum: 600_000 }),
}

export const TAX_ENV = Type.Object({
  ...TAX_BREAKER_ENV,
  TAX_PROVIDER_URL: Type.String({ default: 'http://127.0.0.1:8190', pattern: '^https?://' }),
  TAX_QUOTE_DEADLINE_MS: Type.Integer({ default: 2_000, minimum: 10, maximum: 10_000 }),
  TAX_COMPENSATION_TABLE: Type.String({ default: DEFAULT_TABLE_FILE }),
  TAX_CERTIFICATE_FILE: Type.String({ default: '.data/tax-certificate.json' }),
  TAX_CERTIFICATE_MAX_AGE_HOURS: Type.Number({ default: 168, minimum: 0, maximum: 8_760 }),
})

/**
 * What worker-tax reads to run tax-reconcile jobs (services/tax/jobs). The pace
 * is how many reconciliations one worker process starts per second: MaxWorkers
 * bounds how many run at once, not how fast they follow each other, and with a
 * fast provider three of them drain a backlog as fast as the CPU allows.
 */
export const TAX_RECONCILE_ENV = Type.Object({
  TAX_PROVIDER_URL: TAX_ENV.properties.TAX_PROVIDER_URL,
  TAX_RECONCILE_PER_SECOND: Type.Number({ default: 10, minimum: 0.1, maximum: 10_000 }),
  // A held reconcile queue can wait: each failed probe of worker-tax's breaker
  // doubles its wait up to this, so the provider gets fewer of them in a long outage.
  TAX_RECONCILE_PROBE_MAX_MS: Type.Integer({ default: 30_000, minimum: 10, maximum: 3_600_000 }),
  // worker-tax's breaker weighs fewer calls than the lane's: at most MaxWorkers
  // (3) reconcile calls run at once, and behind the lane's window of 20, full
  // of answers from before a fault, a hung provider took ~12 slow calls from
  // it before more than half of the window had failed. 3 of the last 5 is one
  // round of them (of 6, 3 is not more than half: it took two rounds).
  TAX_RECONCILE_BREAKER_WINDOW_CALLS: Type.Integer({ default: 5, minimum: 1, maximum: 10_000 }),
  TAX_RECONCILE_BREAKER_MIN_CALLS: Type.Integer({ default: 3, minimum: 1, maximum: 10_000 }),
  ...TAX_BREAKER_ENV,
})
