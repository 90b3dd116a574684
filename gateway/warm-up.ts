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
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { hashKey } from '../shared/api-keys.ts'
import { createOriginPool } from '../shared/lane-kit/http.ts'
import type { KeySource } from './auth.ts'

const REHEARSAL = Symbol('gateway-warm-up')
type Marked = FastifyRequest & { [REHEARSAL]?: boolean }

/** Whether `req` is one of the gateway's own warm-up requests. */
export const isRehearsal = (req: FastifyRequest): boolean => (req as Marked)[REHEARSAL] === true

/**
 * Marks the warm-up's requests as they arrive (`claim`), with the mark declared
 * on every request from its start: a property only the warm-up's requests got
 * would give them another hidden class than a client's, and the first client
 * request would throw away all the code V8 compiled on them (warmUpHeaders).
 */
export function claimRehearsals (app: FastifyInstance, warmUp: GatewayWarmUp): void {
  app.decorateRequest(REHEARSAL as unknown as string, false)
  app.addHook('onRequest', (req, _reply, done) => { warmUp.claim(req); done() })
}

/** The client id the warm-up's requests run as (its own retry-guard counters). */
export const WARM_UP_CLIENT = 'watertight-warm-up'

/**
 * Cards no account has: the lane declines them, in the transaction it rolls
 * back. Ids with and without digits, and a long run of them that is no card
 * number (not Luhn-valid), so the PAN check's every branch has run before a
 * client's ids, which mostly carry digits, reach it.
 */
const WARM_UP_BODIES = [
  { merchantId: 'm_warm_up', cardToken: 'tok_warm_up', amount: { value: 1, currency: 'EUR' } },
  { merchantId: 'm_warm_up_42', cardToken: 'tok_warm_up_000001', amount: { value: 1_250, currency: 'USD' } },
  { merchantId: 'warm-up-7', cardToken: 'tok_warm_up_4000000000000001', amount: { value: 99_999, currency: 'EUR' } },
].map(b => JSON.stringify(b))
const CONCURRENCY = 8

/**
 * The headers of the warm-up's n-th request, in one of many orders, some with
 * headers clients commonly add. V8 compiles the hot path for the shapes it has
 * seen: an object's hidden class follows the order its properties were added,
 * and Node builds `req.headers` in the order they arrive. Warmed with one
 * order, the first client that sends another deoptimized the whole path (the
 * HTTP parser's callbacks, hooks, the guard, the proxy) and its first few
 * hundred milliseconds ran unoptimized at two to three times the CPU. Past
 * four shapes, V8 compiles these reads for any shape, as a gateway serving
 * many kinds of client runs anyway, so a new client's order changes nothing.
 */
const REQUIRED = ['authorization', 'content-type', 'idempotency-key'] as const
const EXTRA = [[], ['accept'], ['user-agent'], ['user-agent', 'accept'], ['accept', 'user-agent', 'x-request-id']] as const
const ORDERS = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]] as const
function warmUpHeaders (n: number, values: Record<(typeof REQUIRED)[number], string>): Record<string, string> {
  const all: Record<string, string> = {
    ...values, accept: 'application/json', 'user-agent': 'watertight-warm-up', 'x-request-id': `warm-up-${n}`,
  }
  const order = ORDERS[n % ORDERS.length]!.map(i => REQUIRED[i]!)
  const names = [...order, ...EXTRA[Math.floor(n / ORDERS.length) % EXTRA.length]!]
  // The extras go before, after or between the required headers, by turn.
  const at = n % (names.length + 1)
  const h: Record<string, string> = {}
  for (const name of [...names.slice(at), ...names.slice(0, at)]) h[name] = all[name]!
  return h
}

export interface WarmUpLog { info (o: object, m: string): void, warn (o: object, m: string): void }

export class GatewayWarmUp {
  // '' when there is no warm-up running: always a string, so the code V8
  // compiled on the warm-up's requests stays valid when it ends (warmUpHeaders).
  #key = ''
  #hash = ''
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
    // The clients' keys looked up first, for the warm-up's requests too: that is the path a client's takes.
    return { ...keys, lookup: h => keys.lookup(h) ?? (h === this.#hash && h !== '' ? WARM_UP_CLIENT : undefined) }
  }

  /**
   * Marks `req` a rehearsal if it carries the warm-up's key. Run before
   * anything else sees the request (the gateway's own shedding included): a
   * gateway that starts on a starved host lags in its first second, and its
   * unready warm-up, which no client is waiting on, must not be shed as traffic.
   */
  claim (req: FastifyRequest): void {
    if (this.#key === '') return
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
      const authorization = `Bearer ${this.#key}`
      try {
        await Promise.all(Array.from({ length: Math.min(CONCURRENCY, left) }, async () => {
          while (left-- > 0) {
            const i = ++n
            const headers = warmUpHeaders(i, { authorization, 'content-type': 'application/json', 'idempotency-key': `warm-up-${process.pid}-${i}` })
            const r = await pool.request({ method: 'POST', path: '/v1/authorizations', headers, body: WARM_UP_BODIES[i % WARM_UP_BODIES.length] })
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
      this.#key = ''
      this.#hash = ''
      this.#done = true
    }
  }
}
