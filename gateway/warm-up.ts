// The gateway is ready only once warm: before it reports ready, it sends its
// own listener card authorizations through the whole data-plane path (auth,
// retry guard, body, PAN check, schema, proxy, the lane's writer) until V8 has
// compiled it. A fleet that starts cold and takes full load at once otherwise
// spends its first seconds at a much higher CPU cost per request, fills the
// cores and sheds (npm run bench -- slow-start, docs/benchmarks.md).
//
// Nothing of it is a payment: the warm-up's requests carry a key made for it
// (random, in this process's memory only, forgotten when the warm-up ends), so
// no client can send one; the gateway marks them to the lane as rehearsals,
// which card-auth's writer runs in a transaction it rolls back; and they are
// left out of the gateway's and the lane's request metrics.
import crypto from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyRequest } from 'fastify'
import { hashKey } from '../shared/api-keys.ts'
import { createOriginPool } from '../shared/lane-kit/http.ts'
import type { KeySource } from './auth.ts'

const REHEARSAL = Symbol('gateway-warm-up')
type Marked = FastifyRequest & { [REHEARSAL]?: true }

/** Whether `req` is one of the gateway's own warm-up requests. */
export const isRehearsal = (req: FastifyRequest): boolean => (req as Marked)[REHEARSAL] === true

/** The client id the warm-up's requests run as (its own retry-guard counters). */
export const WARM_UP_CLIENT = 'watertight-warm-up'

/** A card no account has: the lane declines it, in the transaction it rolls back. */
const WARM_UP_BODY = JSON.stringify({ merchantId: 'm_warm_up', cardToken: 'tok_warm_up', amount: { value: 1, currency: 'EUR' } })
const CONCURRENCY = 8

export interface WarmUpLog { info (o: object, m: string): void, warn (o: object, m: string): void }

export class GatewayWarmUp {
  #key: string | undefined
  #hash: string | undefined
  #done: boolean

  /** `requests` 0: no warm-up, ready at once. */
  constructor (readonly requests: number) {
    this.#done = requests <= 0
    if (this.#done) return
    this.#key = crypto.randomBytes(32).toString('base64url')
    this.#hash = hashKey(this.#key)
  }

  get done (): boolean { return this.#done }

  /**
   * `keys` with the warm-up's own key in it while the warm-up runs, so its
   * requests take the same authentication path as a client's.
   */
  keySource (keys: KeySource): KeySource {
    return { ...keys, lookup: h => h === this.#hash && this.#hash !== undefined ? WARM_UP_CLIENT : keys.lookup(h) }
  }

  /**
   * Marks `req` a rehearsal if it carries the warm-up's key. Run before
   * anything else sees the request (the gateway's own shedding included): a
   * gateway that starts on a starved host lags in its first second, and its
   * unready warm-up, which no client is waiting on, must not be shed as traffic.
   */
  claim (req: FastifyRequest): void {
    if (this.#key === undefined) return
    const h = Buffer.from(String(req.headers.authorization))
    const k = Buffer.from(`Bearer ${this.#key}`)
    if (h.length === k.length && crypto.timingSafeEqual(h, k)) (req as Marked)[REHEARSAL] = true
  }

  /**
   * Waits (up to `waitMs`) for card-auth to have a ready replica, then sends
   * `requests` authorizations to `url`, CONCURRENCY at a time. Without a ready
   * card-auth it gives up: a gateway must serve the other lanes whatever one
   * lane does. Either way the key is forgotten and the gateway is ready.
   */
  async run (o: { url: string, waitMs: number, cardAuthReady: () => boolean, log: WarmUpLog }): Promise<void> {
    if (this.#done) return
    const t0 = performance.now()
    const statuses: Record<number, number> = {}
    try {
      while (!o.cardAuthReady() && performance.now() - t0 < o.waitMs) await sleep(100)
      if (!o.cardAuthReady()) {
        o.log.warn({ waitedMs: o.waitMs }, 'warm-up skipped: no card-auth replica ready; ready cold')
        return
      }
      const pool = createOriginPool(o.url, { connections: CONCURRENCY, timeoutMs: 15_000 })
      let left = this.requests
      let n = 0
      const headers = { authorization: `Bearer ${this.#key!}`, 'content-type': 'application/json' }
      try {
        await Promise.all(Array.from({ length: Math.min(CONCURRENCY, left) }, async () => {
          while (left-- > 0) {
            const r = await pool.request({ method: 'POST', path: '/v1/authorizations', headers: { ...headers, 'idempotency-key': `warm-up-${process.pid}-${++n}` }, body: WARM_UP_BODY })
            await r.body.dump()
            statuses[r.statusCode] = (statuses[r.statusCode] ?? 0) + 1
          }
        }))
      } finally {
        await pool.close()
      }
      o.log.info({ requests: this.requests, statuses, ms: Math.round(performance.now() - t0) }, 'warm: ready')
    } catch (err) {
      o.log.warn({ err, statuses }, 'warm-up cut short; ready')
    } finally {
      this.#key = undefined
      this.#hash = undefined
      this.#done = true
    }
  }
}
