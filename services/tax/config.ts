// The tax lane's own environment (beside TAX_* of the lane table), validated at
// boot (main.ts); docs/operations.md "Tax lane" lists it, held to it by
// test/config-docs.test.ts.
import { Type } from 'typebox'
import { DEFAULT_TABLE_FILE } from './compensation/table.ts'

export const TAX_ENV = Type.Object({
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
})
