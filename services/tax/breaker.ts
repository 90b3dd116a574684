// The tax provider's circuit breaker, as the lane and worker-tax each build it
// from TAX_BREAKER_* (services/tax/config.ts). Its probe is one quote for a
// jurisdiction every provider knows; a call counts against the provider when it
// errs or misses its deadline, never for an unknown jurisdiction (an answer) or
// for the caller's own abort.
import type { Pool } from 'undici'
import { AppError } from '../../shared/errors.ts'
import { DependencyBreaker, type BreakerTransition } from '../../shared/breaker.ts'
import { ProviderError, quoteFromProvider, type ProviderCaller } from './provider.ts'

export interface TaxBreakerConfig {
  TAX_BREAKER: 'on' | 'off'
  TAX_BREAKER_FAILURE_RATE: number
  TAX_BREAKER_WINDOW_CALLS: number
  TAX_BREAKER_MIN_CALLS: number
  TAX_BREAKER_SLOW_CALL_MS: number
  TAX_BREAKER_HALF_OPEN_AFTER_MS: number
}

/** A setting and the variable it came from, for the one-line error. */
interface NamedSetting { value: number, name: string }

/** The breaker, or undefined with TAX_BREAKER=off; a bad combination is ERR_CONFIG_INVALID, said in one line. */
export function providerBreaker (
  cfg: TaxBreakerConfig,
  provider: Pool,
  onTransition: (t: BreakerTransition) => void,
  o: {
    caller: ProviderCaller['process']
    halfOpenMaxMs?: number
    window?: NamedSetting
    minCalls?: NamedSetting
    /**
     * Whether another process is probing the provider and finds it still
     * down: then this breaker's probe fails at once, with no call of its own.
     */
    probedElsewhere?: (signal: AbortSignal) => Promise<boolean>
  }
): DependencyBreaker | undefined {
  if (cfg.TAX_BREAKER === 'off') return undefined
  // worker-tax passes a window of its own (TAX_RECONCILE_BREAKER_*).
  const window = o.window ?? { value: cfg.TAX_BREAKER_WINDOW_CALLS, name: 'TAX_BREAKER_WINDOW_CALLS' }
  const min = o.minCalls ?? { value: cfg.TAX_BREAKER_MIN_CALLS, name: 'TAX_BREAKER_MIN_CALLS' }
  if (min.value > window.value) {
    throw new AppError('ERR_CONFIG_INVALID', { detail: `invalid configuration: ${min.name} (${min.value}) must not exceed ${window.name} (${window.value})` })
  }
  return new DependencyBreaker({
    dependency: 'tax-provider',
    failureRate: cfg.TAX_BREAKER_FAILURE_RATE,
    window: window.value,
    minimumCalls: min.value,
    slowCallMs: cfg.TAX_BREAKER_SLOW_CALL_MS,
    halfOpenAfterMs: cfg.TAX_BREAKER_HALF_OPEN_AFTER_MS,
    halfOpenMaxMs: o.halfOpenMaxMs,
    probe: async signal => {
      if (await o.probedElsewhere?.(signal)) throw new ProviderError('error', 'still failing, as the tax lane\'s own probes find')
      return await quoteFromProvider(provider, { jurisdiction: 'DE', amount: { value: 100, currency: 'EUR' } }, {
        deadlineMs: cfg.TAX_BREAKER_SLOW_CALL_MS, signals: [signal], caller: { process: o.caller, probe: true },
      })
    },
    isFailure: err => err instanceof ProviderError && err.kind !== 'unknown_jurisdiction',
    onTransition,
  }).start()
}

/** The log line of a transition: opening and closing are warnings, probing is news. */
export function logTransition (
  log: { warn (o: object, m: string): void, info (o: object, m: string): void }, t: BreakerTransition
): void {
  const line = t.to === 'open'
    ? `${t.dependency} breaker open (${t.reason}): answering without it until a probe succeeds`
    : t.to === 'closed'
      ? `${t.dependency} breaker closed: a probe answered, calls go through again`
      : `${t.dependency} breaker half-open: probing`
  if (t.to === 'half_open') log.info({ breaker: t }, line)
  else log.warn({ breaker: t }, line)
}
