// The tax sandbox: a stand-in for the third-party tax API, with fault injection
// (latency, jitter, error rate, hang, connection reset) settable at runtime.
// It is not a lane: it plays the slow dependency of INC-4491. Like every
// process it sheds under pressure (shared/health-check.ts); a fault it is told
// to play (latency, hang) is not pressure, so the drills still see the fault.
import type { FastifyServerOptions } from 'fastify'
import { SandboxFaults } from '../../shared/admin-schemas.ts'
import { TaxQuoteRequest } from '../../shared/api-schemas.ts'
import { createHttpApp } from '../../shared/http-app.ts'
import { AppError } from '../../shared/errors.ts'
import client from 'prom-client'
import healthCheck from '../../shared/health-check.ts'
import { createRegistry } from '../../shared/metrics.ts'
import { DEFAULT_PRESSURE_LIMITS, type PressureLimits } from '../../shared/pressure-config.ts'
import { registerProcessOps } from '../../shared/process-ops.ts'
import { rateFor } from './rates.ts'

// The fault model lives in shared/ so the deck validates the same shape it forwards.
export const Faults = SandboxFaults
export type Faults = SandboxFaults

// Who asked, from the User-Agent the fleet's callers send (services/tax/provider.ts):
// `tax`, `tax probe`, `worker-tax`, `worker-tax probe`; anything else is `other`.
const CALLER = /^watertight-(tax|worker-tax)( \(probe\))?$/
function callerOf (ua: unknown): string {
  const m = typeof ua === 'string' ? CALLER.exec(ua) : null
  return m ? `${m[1]}${m[2] ? ' probe' : ''}` : 'other'
}

/** The quotes asked while one setting of the faults was in force, by caller. */
export interface FaultPeriod { faults: Faults, since: string, byCaller: Record<string, number> }

const NORMAL: Faults = Object.freeze({ latencyMs: 0, jitterMs: 0, errorRate: 0, mode: 'normal' })

export function buildApp (opts: { logger?: FastifyServerOptions['logger'], random?: () => number, pressure?: PressureLimits } = {}) {
  // A hung answer must not hold the sandbox open at shutdown.
  const app = createHttpApp({ logger: opts.logger, forceCloseConnections: true })
  app.register(healthCheck, { name: 'tax-sandbox', limits: opts.pressure ?? DEFAULT_PRESSURE_LIMITS })
  const random = opts.random ?? Math.random
  let faults: Faults = { ...NORMAL }
  const pending = new Set<() => void>()

  const registry = createRegistry('tax-sandbox')
  const quotes = new client.Counter({
    name: 'sandbox_quotes_total',
    help: 'Quotes asked of the sandbox, by the fault mode in force and by caller (its User-Agent)',
    labelNames: ['mode', 'caller'],
    registers: [registry],
  })
  registerProcessOps(app, { registry, healthCheck: true })
  // The quotes asked under each setting of the faults, by caller: the current
  // setting's and the one before it, so whoever sets a fault and clears it can
  // read exactly the calls that arrived while it was on (GET /faults/calls).
  let period: FaultPeriod = { faults, since: new Date().toISOString(), byCaller: {} }
  let previous: FaultPeriod | null = null
  const change = (next: Faults): Faults => {
    faults = next
    previous = period
    period = { faults, since: new Date().toISOString(), byCaller: {} }
    return faults
  }
  app.get('/faults', async () => faults)
  app.get('/faults/calls', async () => ({ current: period, previous }))
  app.put('/faults', { schema: { body: Faults } }, async req => {
    change({ ...NORMAL, ...(req.body as Faults) })
    app.log.warn({ faults }, 'faults changed')
    return faults
  })
  app.delete('/faults', async () => change({ ...NORMAL }))

  app.post('/v1/rates/quote', { schema: { body: TaxQuoteRequest } }, async (req, reply) => {
    const f = faults
    const caller = callerOf(req.headers['user-agent'])
    quotes.inc({ mode: f.latencyMs > 0 && f.mode === 'normal' ? 'slow' : f.mode, caller })
    period.byCaller[caller] = (period.byCaller[caller] ?? 0) + 1
    if (f.mode === 'reset') { req.raw.socket.destroy(); return reply.hijack() }
    if (f.mode === 'hang') return new Promise(() => {}) // never answers; the client's deadline must cut it
    const delay = f.latencyMs + (f.jitterMs > 0 ? Math.floor(random() * f.jitterMs) : 0)
    if (delay > 0) {
      await new Promise<void>(resolve => {
        const t = setTimeout(() => { pending.delete(wake); resolve() }, delay)
        const wake = (): void => { clearTimeout(t); resolve() }
        pending.add(wake)
      })
    }
    if (f.errorRate > 0 && random() < f.errorRate) { reply.code(500); return { error: 'injected provider error' } }
    const body = req.body as { jurisdiction: string, amount: { value: number, currency: string } }
    const r = rateFor(body.jurisdiction)
    if (!r) throw new AppError('ERR_UNKNOWN_JURISDICTION', { detail: `unknown jurisdiction ${body.jurisdiction}` })
    return { jurisdiction: r.jurisdiction, rate: r.rate, tax: Math.round(body.amount.value * r.rate) }
  })
  // Slow answers in flight must not keep the process alive at shutdown.
  app.addHook('onClose', async () => { for (const wake of pending) wake() })
  return app
}
