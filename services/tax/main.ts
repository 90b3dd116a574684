import { Type } from 'typebox'
import { loadConfig } from '../../shared/config.ts'
import { runLane } from '../../shared/lane-kit/lane-main.ts'
import { buildApp } from './app.ts'
import { DEFAULT_TABLE_FILE } from './compensation/table.ts'

const cfg = loadConfig(Type.Object({
  TAX_PROVIDER_URL: Type.String({ default: 'http://127.0.0.1:8190', pattern: '^https?://' }),
  TAX_QUOTE_DEADLINE_MS: Type.Integer({ default: 2_000, minimum: 10, maximum: 10_000 }),
  TAX_COMPENSATION_TABLE: Type.String({ default: DEFAULT_TABLE_FILE }),
  TAX_CERTIFICATE_FILE: Type.String({ default: '.data/tax-certificate.json' }),
  TAX_CERTIFICATE_MAX_AGE_HOURS: Type.Number({ default: 168, minimum: 0, maximum: 8_760 }),
}), process.env)

await runLane('tax', base => buildApp({ ...base, providerUrl: cfg.TAX_PROVIDER_URL, quoteDeadlineMs: cfg.TAX_QUOTE_DEADLINE_MS,
  compensation: { tableFile: cfg.TAX_COMPENSATION_TABLE, certificateFile: cfg.TAX_CERTIFICATE_FILE, maxAgeMs: cfg.TAX_CERTIFICATE_MAX_AGE_HOURS * 3_600_000 },
}))
