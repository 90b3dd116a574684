// The retry guard's counters in Redis, shared by every gateway replica, so
// ADV-IR-01's "at most 3 retries of a key in any 10 s" and the client rate hold
// fleet-wide (gateway/retry-guard.ts keeps the same rules in memory).
//
// One Lua script decides a request in one round trip, atomically: the client's
// rate (a fixed window, as @fastify/rate-limit's own store counts), its retry
// budget window, whether the key was seen (and the earliest its retry is
// welcome), and the key's sliding log of attempts as a sorted set (the
// admitted attempt held at now + hold until its answer, as SlidingLog.hold).
// A second script, sent after the answer and waited on by no request, releases
// the hold and notes the answer's Retry-After. Times are Redis's own clock
// (TIME), one clock for every replica.
//
// The store must never be the shared failure domain the spec forbids: no
// offline queue (a command while disconnected fails at once), no resend of
// unanswered commands after a reconnect, every command timed out after the
// decision budget, and a breaker that stops asking a failing store and probes
// it again a second later. The caller decides locally whenever this throws.
// Each decision carries its request's id and the script remembers it for a
// window: a decision that reached Redis twice is counted once.
import { Redis } from 'ioredis'
import { BrokenCircuitError, circuitBreaker, CircuitState, ConsecutiveBreaker, handleAll, type CircuitBreakerPolicy } from 'cockatiel'

export type SharedVerdict = 'ok' | 'client_rate' | 'retry_storm' | 'retry_early' | 'retry_budget'
const VERDICTS: readonly SharedVerdict[] = ['ok', 'client_rate', 'retry_storm', 'retry_early', 'retry_budget']

export interface SharedDecision {
  verdict: SharedVerdict
  /** Milliseconds until the refused request would be admitted. */
  ttlMs: number
  /** retry_budget: the retries allowed in the window. */
  allowed: number
}

export interface SharedLimits {
  windowMs: number
  perKeyAttempts: number
  /** The longest an admitted attempt can be in flight. */
  holdMs: number
  budgetRatio: number
  budgetFloor: number
  clientRateMax: number
  clientRateWindowMs: number
}

export interface GuardStoreOptions {
  url: string
  /** The most a decision may wait on Redis (ms). */
  budgetMs: number
  /** Key prefix, so several fleets can share one Redis. */
  prefix?: string
  /** Called when the store turns unavailable (false) or available again (true). */
  onChange?: (up: boolean, reason?: string) => void
}

/** Thrown when the store cannot decide within its budget (or the breaker is open). */
export class StoreUnavailable extends Error {}

/** The one error for every request while the breaker is open. */
const OUT = new StoreUnavailable('breaker open')
const OVER_BUDGET = new StoreUnavailable('no answer within the decision budget')

/** How long a key's "seen" mark lasts: a retry after that counts as a first attempt. */
const SEEN_WINDOWS = 10

const DECIDE = `
local function now_ms ()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local id, has_key = ARGV[1], ARGV[2] == '1'
local window, max, hold = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ratio, floor = tonumber(ARGV[6]), tonumber(ARGV[7])
local rate_max, rate_window, seen_ttl = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
if has_key then
  local done = redis.call('GET', KEYS[5])
  if done then
    local v, ttl, allowed = string.match(done, '^(%d+):(%d+):(%d+)$')
    return { tonumber(v), tonumber(ttl), tonumber(allowed) }
  end
end
local function finish (v, ttl, allowed)
  ttl = math.max(0, math.floor(ttl))
  if has_key then redis.call('SET', KEYS[5], v .. ':' .. ttl .. ':' .. allowed, 'PX', window) end
  return { v, ttl, allowed }
end
local now = now_ms()
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], rate_window) end
if n > rate_max then return finish(1, redis.call('PTTL', KEYS[1]), rate_max) end
if not has_key then return { 0, 0, 0 } end

local w = redis.call('HMGET', KEYS[2], 's', 'r', 't')
local start, reqs, rets = tonumber(w[1]), tonumber(w[2]) or 0, tonumber(w[3]) or 0
if not start or now - start >= window then start, reqs, rets = now, 0, 0 end
reqs = reqs + 1
local function save ()
  redis.call('HSET', KEYS[2], 's', start, 'r', reqs, 't', rets)
  redis.call('PEXPIRE', KEYS[2], window)
end
local not_before = redis.call('GET', KEYS[3])
local is_retry = not_before ~= false
redis.call('SET', KEYS[3], not_before or '0', 'PX', seen_ttl)

redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[4])
local admitted = count < max
redis.call('ZADD', KEYS[4], admitted and (now + hold) or now, id)
if count + 1 > max then redis.call('ZPOPMIN', KEYS[4], count + 1 - max) end
redis.call('PEXPIRE', KEYS[4], window + hold)
if not admitted then
  save()
  local len = redis.call('ZCARD', KEYS[4])
  local oldest = redis.call('ZRANGE', KEYS[4], len - max, len - max, 'WITHSCORES')
  return finish(2, tonumber(oldest[2]) + window - now, max)
end
if is_retry and now < tonumber(not_before) then
  save()
  return finish(3, tonumber(not_before) - now, 1)
end
if is_retry then
  local allowed = math.max(floor, math.floor(ratio * reqs))
  if rets + 1 > allowed then
    save()
    return finish(4, start + window - now, allowed)
  end
  rets = rets + 1
end
save()
return finish(0, 0, 0)
`

const ANSWERED = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] == '1' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if s and tonumber(s) > now then redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1]) end
end
local after = tonumber(ARGV[3])
if after > 0 and redis.call('EXISTS', KEYS[2]) == 1 then redis.call('SET', KEYS[2], now + after, 'PX', ARGV[4]) end
return 1
`

type Scripted = Redis & {
  wtDecide (...args: Array<string | number>): Promise<[number, number, number]>
  wtAnswered (...args: Array<string | number>): Promise<number>
}

export class RedisGuardStore {
  readonly #redis: Scripted
  readonly #breaker: CircuitBreakerPolicy
  readonly #prefix: string
  readonly #limits: SharedLimits
  #up = true
  readonly #probe: NodeJS.Timeout
  readonly #budgetMs: number

  constructor (o: GuardStoreOptions, limits: SharedLimits) {
    this.#prefix = o.prefix ?? 'wt:'
    this.#budgetMs = o.budgetMs
    this.#limits = limits
    this.#redis = new Redis(o.url, {
      // A command while disconnected fails at once instead of waiting in a queue.
      enableOfflineQueue: false,
      // Nothing unanswered is sent again after a reconnect, and no command is retried.
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      // A backstop that clears a hung store's unanswered commands; the budget is
      // timed per decision below.
      commandTimeout: Math.max(1_000, o.budgetMs),
      connectTimeout: 1_000,
      // Ready on connect: its INFO check, timed out at the decision budget on a busy host, would drop the connection.
      enableReadyCheck: false,
      // Reconnect forever, at most a second apart: the breaker decides when to ask again.
      retryStrategy: times => Math.min(times * 100, 1_000),
      // No auto-pipelining: behind a hung store it queues each command after the
      // pipeline in flight, and a timed-out command inside it rejects unhandled.
      enableAutoPipelining: false,
    }) as Scripted
    this.#redis.defineCommand('wtDecide', { numberOfKeys: 5, lua: DECIDE })
    this.#redis.defineCommand('wtAnswered', { numberOfKeys: 2, lua: ANSWERED })
    // ioredis reports connection errors as events; the breaker and the log line below say what matters.
    this.#redis.on('error', () => {})
    this.#breaker = circuitBreaker(handleAll, { halfOpenAfter: 1_000, breaker: new ConsecutiveBreaker(3) })
    // Said once when it goes and once when it is back: a failed probe opens the breaker again silently.
    this.#breaker.onBreak(reason => {
      if (!this.#up) return
      this.#up = false
      const err = 'error' in reason ? reason.error : undefined
      o.onChange?.(false, err instanceof Error ? err.message : undefined)
    })
    // While it is out, a PING each second is the breaker's probe (no request is
    // one): an idle gateway comes back to shared counts, and its gauge to 1, too.
    this.#probe = setInterval(() => {
      if (!this.#up) this.#breaker.execute(() => this.#withinBudget(this.#redis.ping())).catch(() => {})
    }, 1_000)
    this.#probe.unref()
    this.#breaker.onReset(() => {
      if (this.#up) return
      this.#up = true
      o.onChange?.(true)
    })
  }

  /**
   * Resolves once connected, or false after `timeoutMs`:
   * a gateway starting beside its Redis then does not decide its first requests
   * alone. Either way it serves; an unreachable store is the breaker's to report.
   */
  async connected (timeoutMs: number): Promise<boolean> {
    const r = this.#redis
    if (r.status !== 'ready') {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([new Promise(resolve => r.once('ready', resolve)), new Promise(resolve => { timer = setTimeout(resolve, timeoutMs) })])
      clearTimeout(timer)
    }
    return r.status === 'ready'
  }

  /** Whether decisions are shared (false while the breaker is open). */
  get up (): boolean { return this.#up }

  #keys (client: string, key: string): { log: string, seen: string } {
    const ck = `${client}\u0000${key}`
    return { log: `${this.#prefix}log:${ck}`, seen: `${this.#prefix}seen:${ck}` }
  }

  /** The shared decision for one request (`key`: its Idempotency-Key on a POST). Throws StoreUnavailable. */
  async decide (client: string, key: string | undefined, id: string): Promise<SharedDecision> {
    // Out: decided locally at once, with no error built per request; the probe above brings it back.
    if (this.#breaker.state !== CircuitState.Closed) throw OUT
    const l = this.#limits
    const k = this.#keys(client, key ?? '')
    try {
      const [v, ttlMs, allowed] = await this.#breaker.execute(() => this.#withinBudget(this.#redis.wtDecide(
        `${this.#prefix}rate:${client}`, `${this.#prefix}win:${client}`, k.seen, k.log, `${this.#prefix}dec:${id}`,
        id, key === undefined ? 0 : 1, l.windowMs, l.perKeyAttempts, l.holdMs, l.budgetRatio, l.budgetFloor,
        l.clientRateMax, l.clientRateWindowMs, l.windowMs * SEEN_WINDOWS,
      )))
      return { verdict: VERDICTS[v] ?? 'ok', ttlMs, allowed }
    } catch (err) {
      if (err instanceof StoreUnavailable) throw err
      if (err instanceof BrokenCircuitError) throw OUT
      throw new StoreUnavailable((err as Error).message)
    }
  }

  /**
   * `answer`, or StoreUnavailable once the budget has passed without it. The
   * budget is the wait on Redis, not on this process: when the timer fires late
   * because the event loop was busy (timers run before the loop reads its
   * sockets), an answer already in the socket is read first (setImmediate runs
   * after the loop's poll), so a busy gateway does not call a quick Redis slow.
   */
  #withinBudget<T> (answer: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let settled = false
      const timer = setTimeout(() => setImmediate(() => { if (!settled) { settled = true; reject(OVER_BUDGET) } }), this.#budgetMs)
      answer.then(
        v => { if (!settled) { settled = true; clearTimeout(timer); resolve(v) } },
        (e: unknown) => { if (!settled) { settled = true; clearTimeout(timer); reject(e) } },
      )
    })
  }

  /**
   * A request decided here was answered: its held attempt counts from now, and
   * a Retry-After (ms, tolerance applied) sets when a retry of its key is welcome.
   * Nobody waits on it; a failure only costs the key its hold's full length.
   */
  answered (client: string, key: string, id: string, held: boolean, retryAfterMs: number): void {
    if (!this.#up) return
    const k = this.#keys(client, key)
    this.#breaker.execute(() => this.#redis.wtAnswered(k.log, k.seen, id, held ? 1 : 0, Math.round(retryAfterMs), this.#limits.windowMs * SEEN_WINDOWS))
      .catch(() => {})
  }

  async close (): Promise<void> {
    clearInterval(this.#probe)
    this.#redis.disconnect()
  }
}
