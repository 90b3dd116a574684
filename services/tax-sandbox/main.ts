import { Type } from 'typebox'
import { loadConfig } from '../../shared/config.ts'
import { onShutdown } from '../../shared/lifecycle.ts'
import { loggerOptions } from '../../shared/http-app.ts'
import { pressureLimits } from '../../shared/pressure-config.ts'
import { buildApp } from './app.ts'

const cfg = loadConfig(Type.Object({
  TAX_SANDBOX_PORT: Type.Integer({ minimum: 0, maximum: 65535, default: 8190 }),
  TAX_SANDBOX_HOST: Type.String({ default: '127.0.0.1' }),
}), process.env)
// TAX_SANDBOX_PRESSURE_MAX_EVENT_LOOP_DELAY_MS / _UTILIZATION / _HEAP_BYTES / _RSS_BYTES
const app = buildApp({ logger: loggerOptions('tax-sandbox'), pressure: pressureLimits('TAX_SANDBOX_') })
await app.listen({ port: cfg.TAX_SANDBOX_PORT, host: cfg.TAX_SANDBOX_HOST })
onShutdown(app.log, () => app.close())
