// Tax quotes. The provider call happens outside any transaction; the quote is
// stored afterwards in one short INSERT, so a slow provider holds no connection.
// When the lane is saturated, the provider fails, or it misses the quote
// deadline, a certified compensation rate answers instead (never a made-up or
// zero rate), and the quote is queued on tax-reconcile to be re-quoted later.
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Pool } from 'undici'
import { TaxQuoteRequest } from '../../shared/api-schemas.ts'
import { AppError } from '../../shared/errors.ts'
import { rateLimitFields } from '../../shared/rate-limit-fields.ts'
import type { LaneKit } from '../../shared/lane-kit/build-lane-app.ts'
import type { Execution } from '../../shared/lane-kit/execution.ts'
import type { LaneResult } from '../../shared/lane-kit/admission.ts'
import { clientIdOf, fingerprint, idempotencyKeyOf, replay } from '../../shared/lane-kit/request-context.ts'
import { storedResponseRoute } from '../../shared/lane-kit/stored-response.ts'
import type { CompensationSource } from './compensation/certificate.ts'
import { send } from '../../shared/lane-kit/admission.ts'
import { BreakerOpenError, type DependencyBreaker } from '../../shared/breaker.ts'
import { ProviderError, providerFailure, quoteFromProvider } from './provider.ts'
import { quoteRecord, storeQuote, storeShedQuote, type QuoteSource } from './store-quote.ts'
import { annotate, traceOf } from '../../shared/tracing.ts'

type CompensationWriter = Parameters<typeof storeShedQuote>[0]

export interface TaxRouteOptions {
  provider: Pool
  quoteDeadlineMs: number
  compensation: CompensationSource
  writer: CompensationWriter
  /** The provider's circuit breaker (absent with TAX_BREAKER=off). */
  breaker?: DependencyBreaker
}

/**
 * Quotes this replica answered lately, by client and key, the oldest dropped
 * past RECENT_KEYS (~1 MB): a retry of one of them is most likely a replay, so
 * its replay lookup goes first and the provider is asked only if the key has
 * no quote after all. A replay of a paid third party's quote costs it nothing.
 */
const RECENT_KEYS = 10_000
class RecentKeys {
  readonly #keys = new Set<string>()
  has (k: string): boolean { return this.#keys.has(k) }
  add (k: string): void {
    if (this.#keys.has(k)) return
    this.#keys.add(k)
    if (this.#keys.size > RECENT_KEYS) this.#keys.delete(this.#keys.values().next().value!)
  }
}
const recentKey = (req: FastifyRequest): string => `${clientIdOf(req)}\u0000${idempotencyKeyOf(req)}`

type CompensationReason = 'saturated' | 'provider_error' | 'provider_deadline' | 'breaker_open'
const WHY: Record<Exclude<CompensationReason, 'saturated'>, string> = {
  provider_error: 'provider failed',
  provider_deadline: 'provider missed the quote deadline',
  breaker_open: 'the provider\'s breaker is open',
}

const RETRY = { 'retry-after': '5' }

export function taxRoutes (opts: TaxRouteOptions) {
  return (app: FastifyInstance, kit: LaneKit): void => {
    const breaker = opts.breaker
    if (breaker) kit.breakers.push(breaker)
    const recent = new RecentKeys()
    // While the provider is failing, a quote of our own once a second tells the
    // lane when it is back, even if no request of a client gets that far. With a
    // breaker, its probe is that quote, and no more calls than its are made.
    if (!breaker) kit.recovery.probe('provider', () => quoteFromProvider(opts.provider, { jurisdiction: 'DE', amount: { value: 100, currency: 'EUR' } }, { deadlineMs: opts.quoteDeadlineMs, signals: [], caller: { process: 'tax', probe: true } }))
    // Answer from the certified table, or say exactly why not.
    const compensate = async (req: FastifyRequest, why: CompensationReason, exec?: Execution): Promise<LaneResult> => {
      const body = req.body as TaxQuoteRequest
      const c = opts.compensation.rateFor(body.jurisdiction)
      if (!c.ok) {
        if (c.why === 'not_certified') throw new AppError('ERR_UNTESTED_COMPENSATION_REJECTED', { detail: c.detail, headers: RETRY })
        if (why === 'saturated') {
          const fields = rateLimitFields({ name: 'tax', quota: kit.limits.permits, windowSeconds: 1, resetSeconds: 5 })
          throw new AppError('ERR_TAX_BULKHEAD_SATURATED', { detail: `all tax permits are busy and ${c.detail}`, headers: { ...RETRY, ...fields.headers }, extensions: fields.extensions })
        }
        throw new AppError('ERR_TAX_PROVIDER_FAILED', { detail: `${WHY[why]} and ${c.detail}`, headers: RETRY })
      }
      const record = quoteRecord(req, { source: 'compensation', rate: c.rate, tableVersion: c.tableVersion, reason: why })
      const r = exec ? await storeQuote(exec, record) : await storeShedQuote(opts.writer, record, traceOf(req))
      recent.add(recentKey(req))
      r.headers = { ...r.headers, 'x-tax-compensation': why }
      r.outcome = 'compensated'
      annotate(req, { 'watertight.tax.compensation': why })
      return r
    }

    const quoteRoute = kit.admitted(async (req: FastifyRequest, exec) => {
      const client = clientIdOf(req)
      const key = idempotencyKeyOf(req)
      const answered = `${client}\u0000${key}`
      const body = req.body as TaxQuoteRequest
      // The replay lookup and the provider call run at once, so a quote holds its
      // permit for the longer of the two rather than their sum; a key already
      // answered stops the provider call and answers from the store. A key this
      // replica answered lately is looked up first, and the provider not asked.
      const stop = new AbortController()
      const ask = () => {
        const call = (signals: AbortSignal[]) => quoteFromProvider(opts.provider, body, {
          deadlineMs: opts.quoteDeadlineMs, signals: [exec.signal, stop.signal, ...signals], caller: { process: 'tax' }, trace: traceOf(req),
        })
        const asked = breaker ? breaker.call(opened => call([opened])) : call([])
        asked.catch(() => {}) // awaited below, or abandoned for a replay
        return asked
      }
      let asked = recent.has(answered) ? undefined : ask()
      let seen
      try {
        seen = await exec.db.query<{ fingerprint: string, response: unknown }>('select fingerprint, response from tax.quotes where client_id = $1 and idempotency_key = $2', [client, key])
      } catch (err) { stop.abort(); throw err }
      if (seen.rows[0]) { stop.abort(); return replay({ ...seen.rows[0], status: 200 }, fingerprint(body)) }
      asked ??= ask()
      let quote: QuoteSource
      try {
        const q = await asked
        kit.recovery.dependencyOk('provider')
        quote = { source: 'provider', rate: q.rate }
      } catch (err) {
        // Opened while this call waited: the answer is the table's, now.
        if (err instanceof BreakerOpenError) return compensate(req, 'breaker_open', exec)
        if (!(err instanceof ProviderError)) throw err
        // The provider's health drives the lane's recovery check (MC-RT-01): an
        // unknown jurisdiction is an answer, a deadline or an error is not.
        if (err.kind === 'unknown_jurisdiction') { kit.recovery.dependencyOk('provider'); throw providerFailure(err) }
        kit.recovery.dependencyFailed('provider')
        return compensate(req, err.kind === 'deadline' ? 'provider_deadline' : 'provider_error', exec)
      }
      const stored = await storeQuote(exec, quoteRecord(req, quote))
      recent.add(answered)
      return stored
    }, (_reason, req) => compensate(req, 'saturated'))
    // An open breaker answers every quote from the table at once, without a
    // permit: the provider is not called, so there is nothing to bound.
    app.post('/v1/tax/quotes', { schema: { body: TaxQuoteRequest } }, breaker
      ? async (req, reply) => breaker.admits() ? quoteRoute(req, reply) : send(reply, await compensate(req, 'breaker_open'))
      : quoteRoute)

    storedResponseRoute(app, kit, { url: '/v1/tax/quotes/:id', table: 'tax.quotes', what: 'tax quote', onReject: () => { throw new AppError('ERR_TAX_BULKHEAD_SATURATED', { headers: RETRY }) } })
  }
}
