import { Type } from 'typebox'
import { loadConfig } from '../../shared/config.ts'
import { runLane } from '../../shared/lane-kit/lane-main.ts'
import { buildApp } from './app.ts'

const cfg = loadConfig(Type.Object({
  TAX_PROVIDER_URL: Type.String({ default: 'http://127.0.0.1:8190', pattern: '^https?://' }),
  TAX_QUOTE_DEADLINE_MS: Type.Integer({ default: 2_000, minimum: 10, maximum: 10_000 }),
}), process.env)

await runLane('tax', base => buildApp({ ...base, providerUrl: cfg.TAX_PROVIDER_URL, quoteDeadlineMs: cfg.TAX_QUOTE_DEADLINE_MS }))
