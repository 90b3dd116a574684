// The retry guard's counters in Redis, shared by every gateway replica, so
// ADV-IR-01's "at most 3 retries of a key in any 10 s" and the client rate hold
// fleet-wide (gateway/retry-guard.ts keeps the same rules in memory).
//
// One Lua script decides a request in one round trip, atomically: the client's
// rate (a fixed window, as @fastify/rate-limit's own store counts), its retry
// budget window, whether the key was seen (and the earliest its retry is
// welcome), and the key's sliding log of attempts as a sorted set (the
// admitted attempt held at now + hold until its answer, as SlidingLog.hold).
// An answer releases its hold (and notes a Retry-After) later, waited on by no
// request. A plain release rides on this replica's next decision, so a request
// costs one round trip, not two; if no decision comes within RELEASE_WAIT_MS
// the waiting releases go in one call of their own. An answer with a
// Retry-After goes at once: a client's early retry may reach another replica
// next. A release carries how long ago its answer was, so the attempt counts
// from the answer either way. Times are Redis's own clock (TIME), one clock for
// every replica.
//
// The store must never be the shared failure domain the spec forbids: no
// offline queue (a command while disconnected fails at once), no resend of
// unanswered commands after a reconnect, every command timed out after the
// decision budget, and a breaker that stops asking a failing store and probes
// it again a second later (StallBreaker: only a store that has stopped
// answering in time, not a hiccup). The caller decides locally whenever this throws.
// Each decision carries its request's id and the script remembers it for a
// window: a decision that reached Redis twice is counted once.
import { Redis } from 'ioredis'
import { BrokenCircuitError, circuitBreaker, CircuitState, handleAll, type CircuitBreakerPolicy, type IBreaker } from 'cockatiel'

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
/** The longest a plain release waits for a decision to ride on (ms). */
const RELEASE_WAIT_MS = 20
/** Releases carried by one decision at most. */
const FOLD_MAX = 16
/** Releases sent in one call of their own at most; this many waiting are sent at once. */
const FLUSH_MAX = 128

// One answered attempt: its hold released as of `ago` ms before the script runs,
// and a Retry-After (ms, 0: none) noted on its key. Both scripts apply these
// from KEYS[first..] (log, seen pairs) and ARGV[firstArg..] (id, held, after, ago).
const RELEASE = `
local function release_all (now, first, first_arg, seen_ttl)
  local j = first_arg
  for i = first, #KEYS, 2 do
    local id, held, after = ARGV[j], ARGV[j + 1] == '1', tonumber(ARGV[j + 2])
    local at = now - tonumber(ARGV[j + 3])
    if held then
      local s = redis.call('ZSCORE', KEYS[i], id)
      if s and tonumber(s) > at then redis.call('ZADD', KEYS[i], 'XX', at, id) end
    end
    if after > 0 and redis.call('EXISTS', KEYS[i + 1]) == 1 then redis.call('SET', KEYS[i + 1], at + after, 'PX', seen_ttl) end
    j = j + 4
  end
end
local function now_ms ()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// KEYS 1-5 and ARGV 1-10: the decision; after them, the releases riding on it
// (applied first, whatever the decision).
const DECIDE = RELEASE + `
local id, has_key = ARGV[1], ARGV[2] == '1'
local window, max, hold = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ratio, floor = tonumber(ARGV[6]), tonumber(ARGV[7])
local rate_max, rate_window, seen_ttl = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local now = now_ms()
release_all(now, 6, 11, seen_ttl)
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

// ARGV[1]: the seen mark's lifetime; then the releases.
const ANSWERED = RELEASE + `
release_all(now_ms(), 1, 2, tonumber(ARGV[1]))
return 1
`

/**
 * Opens when at least 3 decisions in a row failed and the first of them is
 * STALL_MS or more ago: the store has stopped answering within the budget.
 * Not on a count alone: under load the decisions in flight during one short
 * stall of a busy host all miss their budget together, and a plain "3 in a
 * row" opens every few seconds under load and sends a large share of the
 * decisions local each time (npm run bench -- cost --redis).
 */
export class StallBreaker implements IBreaker {
  state = { failures: 0, since: 0 }
  constructor (readonly stallMs: number, readonly now: () => number = () => performance.now()) {}
  success (): void { this.state.failures = 0 }
  failure (): boolean {
    const now = this.now()
    if (this.state.failures++ === 0) this.state.since = now
    return this.state.failures >= 3 && now - this.state.since >= this.stallMs
  }
}

/** How long the store must have failed every decision before the breaker opens (ms). */
const STALL_MS = 100

/** An answer whose release has not been sent yet. */
interface Release { log: string, seen: string, id: string, held: boolean, afterMs: number, at: number }

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
  /** Answers whose release waits for a decision to ride on, oldest first. */
  #releases: Release[] = []
  #flushTimer: NodeJS.Timeout | undefined

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
    // The number of keys goes first: it grows with the releases carried.
    this.#redis.defineCommand('wtDecide', { lua: DECIDE })
    this.#redis.defineCommand('wtAnswered', { lua: ANSWERED })
    // ioredis reports connection errors as events; the breaker and the log line below say what matters.
    this.#redis.on('error', () => {})
    this.#breaker = circuitBreaker(handleAll, { halfOpenAfter: 1_000, breaker: new StallBreaker(STALL_MS) })
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
    const keys = [`${this.#prefix}rate:${client}`, `${this.#prefix}win:${client}`, k.seen, k.log, `${this.#prefix}dec:${id}`]
    const args: Array<string | number> = [
      id, key === undefined ? 0 : 1, l.windowMs, l.perKeyAttempts, l.holdMs, l.budgetRatio, l.budgetFloor,
      l.clientRateMax, l.clientRateWindowMs, l.windowMs * SEEN_WINDOWS,
    ]
    addReleases(this.#releases.splice(0, FOLD_MAX), keys, args)
    try {
      const [v, ttlMs, allowed] = await this.#breaker.execute(() =>
        this.#withinBudget(this.#redis.wtDecide(keys.length, ...keys, ...args)))
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
      const timer = setTimeout(() => setImmediate(() => {
        if (!settled) { settled = true; reject(OVER_BUDGET) }
      }), this.#budgetMs)
      answer.then(
        v => { if (!settled) { settled = true; clearTimeout(timer); resolve(v) } },
        (e: unknown) => { if (!settled) { settled = true; clearTimeout(timer); reject(e) } }
      )
    })
  }

  /**
   * A request decided here was answered: its held attempt counts from now, and
   * a Retry-After (ms, tolerance applied) sets when a retry of its key is welcome.
   * Nobody waits on it; a failure only costs the key its hold's full length.
   */
  answered (client: string, key: string, id: string, held: boolean, retryAfterMs: number): void {
    if (!this.#up || (!held && retryAfterMs <= 0)) return
    const k = this.#keys(client, key)
    this.#releases.push({
      log: k.log, seen: k.seen, id, held, afterMs: Math.round(retryAfterMs), at: performance.now(),
    })
    if (retryAfterMs > 0 || this.#releases.length >= FLUSH_MAX) this.#flush()
    else this.#flushTimer ??= setTimeout(() => this.#flush(), RELEASE_WAIT_MS).unref()
  }

  /** Sends every waiting release in calls of their own. */
  #flush (): void {
    clearTimeout(this.#flushTimer)
    this.#flushTimer = undefined
    while (this.#releases.length > 0) {
      const keys: string[] = []
      const args: Array<string | number> = [this.#limits.windowMs * SEEN_WINDOWS]
      addReleases(this.#releases.splice(0, FLUSH_MAX), keys, args)
      this.#breaker.execute(() => this.#redis.wtAnswered(keys.length, ...keys, ...args)).catch(() => {})
    }
  }

  async close (): Promise<void> {
    clearInterval(this.#probe)
    clearTimeout(this.#flushTimer)
    this.#redis.disconnect()
  }
}

/** Appends `releases` to a script's keys and arguments, in RELEASE's layout. */
function addReleases (releases: Release[], keys: string[], args: Array<string | number>): void {
  const now = performance.now()
  for (const r of releases) {
    keys.push(r.log, r.seen)
    args.push(r.id, r.held ? 1 : 0, r.afterMs, Math.max(0, Math.round(now - r.at)))
  }
}
