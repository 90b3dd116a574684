import { loadConfig } from '../../shared/config.ts'
import { runLane } from '../../shared/lane-kit/lane-main.ts'
import { buildApp } from './app.ts'
import { TAX_ENV } from './config.ts'

// The tax environment is read inside the start, so a bad value is the one-line start failure.
await runLane('tax', base => {
  const cfg = loadConfig(TAX_ENV, process.env)
  return buildApp({
    ...base,
    providerUrl: cfg.TAX_PROVIDER_URL,
    quoteDeadlineMs: cfg.TAX_QUOTE_DEADLINE_MS,
    breaker: cfg,
    compensation: {
      tableFile: cfg.TAX_COMPENSATION_TABLE,
      certificateFile: cfg.TAX_CERTIFICATE_FILE,
      maxAgeMs: cfg.TAX_CERTIFICATE_MAX_AGE_HOURS * 3_600_000,
    },
  })
}, '/v1/tax/quotes/00000000-0000-7000-8000-000000000000')
