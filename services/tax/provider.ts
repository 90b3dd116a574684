// Client of the third-party tax provider (the sandbox by default). Every call
// is aborted at the quote deadline or when any of the caller's signals fires
// (the execution ended, a replay found), so a slow provider can hold neither a
// permit nor a socket past it.
import type { Pool } from 'undici'
import { AppError } from '../../shared/errors.ts'
import { clientSpan, failed, type Context } from '../../shared/tracing.ts'

export interface ProviderQuote { jurisdiction: string, rate: number, tax: number }

export type ProviderFailure = 'deadline' | 'error' | 'unknown_jurisdiction'

export class ProviderError extends Error {
  readonly kind: ProviderFailure
  constructor (kind: ProviderFailure, message: string) { super(message); this.name = 'ProviderError'; this.kind = kind }
}

type QuoteBody = { jurisdiction: string, amount: { value: number, currency: string } }
/**
 * Who asks: each call names its process in its User-Agent, and a breaker's
 * probe says it is one, so a provider (the sandbox counts calls by it) can
 * tell the lane's quotes from worker-tax's reconciles and from the probes.
 */
export interface ProviderCaller { process: 'tax' | 'worker-tax', probe?: boolean }
type QuoteOptions = { deadlineMs: number, signals: AbortSignal[], caller: ProviderCaller, trace?: Context }

/** The User-Agent of a caller's calls: `watertight-tax`, `watertight-worker-tax (probe)`. */
const userAgent = (c: ProviderCaller): string => `watertight-${c.process}${c.probe ? ' (probe)' : ''}`

/** A quote from the provider; traced as a client span when tracing is on (its traceparent sent along). */
export async function quoteFromProvider (pool: Pool, body: QuoteBody, opts: QuoteOptions): Promise<ProviderQuote> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'user-agent': userAgent(opts.caller) }
  const attributes = { 'watertight.dependency': 'tax-provider', 'watertight.deadline_ms': opts.deadlineMs }
  const span = clientSpan('tax provider quote', attributes, headers, opts.trace)
  try {
    return await ask(pool, body, opts, headers)
  } catch (err) {
    failed(span, err)
    span?.setAttribute('watertight.provider.failure', err instanceof ProviderError ? err.kind : 'stopped')
    throw err
  } finally {
    span?.end()
  }
}

async function ask (
  pool: Pool, body: QuoteBody, opts: QuoteOptions, headers: Record<string, string>
): Promise<ProviderQuote> {
  const deadline = AbortSignal.timeout(opts.deadlineMs)
  const signal = AbortSignal.any([deadline, ...opts.signals])
  try {
    const res = await pool.request({ method: 'POST', path: '/v1/rates/quote', headers, body: JSON.stringify(body), signal })
    const json = await res.body.json() as Record<string, unknown>
    if (res.statusCode === 422 || json.code === 'ERR_UNKNOWN_JURISDICTION') throw new ProviderError('unknown_jurisdiction', String(json.detail ?? 'unknown jurisdiction'))
    if (res.statusCode !== 200) throw new ProviderError('error', `provider answered ${res.statusCode}`)
    if (typeof json.rate !== 'number' || !(json.rate >= 0 && json.rate < 1)) throw new ProviderError('error', 'provider answered without a valid rate')
    return { jurisdiction: String(json.jurisdiction), rate: json.rate, tax: Number(json.tax) }
  } catch (err) {
    if (err instanceof ProviderError) throw err
    const stopped = opts.signals.find(s => s.aborted)
    if (stopped) throw stopped.reason
    if (deadline.aborted) throw new ProviderError('deadline', `provider missed the ${opts.deadlineMs} ms quote deadline`)
    throw new ProviderError('error', (err as Error).message)
  }
}

export function providerFailure (err: ProviderError): AppError {
  if (err.kind === 'unknown_jurisdiction') return new AppError('ERR_UNKNOWN_JURISDICTION', { detail: err.message })
  return new AppError('ERR_TAX_PROVIDER_FAILED', { detail: err.message })
}
