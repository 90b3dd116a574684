// A sliding-window limit for @fastify/rate-limit: "at most `max` attempts of a
// key within ANY `timeWindow` ms", as a sliding log of attempt times.
//
// The plugin's own store counts in fixed windows that start at a key's first
// attempt and reset `timeWindow` later, so up to 2 × max attempts get through
// around a window's edge (max at its end, max more at the start of the next).
// Here each key keeps the monotonic times of its last `max` counted attempts,
// oldest first: an attempt is admitted when fewer than `max` of them lie within
// the last `timeWindow` ms, and the answer's ttl is when the oldest of them
// leaves the window, which is exactly when the next attempt would be admitted
// (if none comes in between).
//
// `countRejected`: whether a refused attempt is logged too. With it, the limit
// is on attempts, not on admitted attempts: a client that keeps hammering
// without backoff stays refused until it has paused for the ttl it was given,
// instead of getting a fresh attempt through every time an old one ages out.
//
// `hold` / `release`: an admitted attempt that is passed on (to a lane) counts
// from its admission until its answer, and its 10 s run from the answer, not
// from the admission. Counted from admission only, an attempt admitted at 0 that
// reached a backed-up lane at 3 s and a fifth admitted at 10 s put five attempts
// of one key into the lane within 7 s. A held entry is `now + holdMs` (the longest
// the attempt can be in flight), so a release that never comes (a path that sends
// no answer) costs the key one window after that, not forever.
//
// Memory: at most `max` numbers per key and at most `capacity` keys. The Map
// is kept in last-use order; every SWEEP_EVERY_MS a call first drops the keys
// at its head whose log has left the window entirely (so idle keys go away as
// traffic flows), and past `capacity` the least recently used 1% are forgotten
// at once even if their window is still open. Such a key starts afresh: the
// bound on memory wins over the limit for a flood of more than `capacity`
// distinct keys within one window.
//
// Both drop from the Map's head in batches, not one key per call: V8 leaves a
// deleted entry as a hole until the table is next rebuilt, and every new
// iterator steps over the holes at the head, so taking the first key once per
// call costs time in proportion to the keys dropped since, and on a full Map
// under load the sweep becomes a visible share of the gateway's CPU.
import { performance } from 'node:perf_hooks'

export interface SlidingLogOptions {
  /** How many keys are remembered at most. */
  capacity: number
  /** Log refused attempts too (the limit is then on attempts, not on admissions). */
  countRejected: boolean
}

export interface Hit {
  /** Attempts counted in the window, including this one; `max + 1` when refused. */
  current: number
  /** Milliseconds until an attempt would be admitted (0 while there is room). */
  ttl: number
}

/** How often idle keys are dropped (ms of the log's clock). */
const SWEEP_EVERY_MS = 100
/** Idle keys dropped per sweep at most, so one sweep after a lull is a short pause, not a long one. */
const SWEEP_MAX = 10_000

/** Drop the `n` oldest entries of an insertion-ordered Map with one iterator (see the note above on holes). */
export function dropOldest<K, V> (m: Map<K, V>, n: number): void {
  const it = m.keys()
  for (let i = 0; i < n; i++) {
    const next = it.next()
    if (next.done === true) return
    m.delete(next.value)
  }
}

export class SlidingLog {
  readonly #logs = new Map<string, number[]>()
  readonly #opts: SlidingLogOptions
  readonly #now: () => number
  #swept = -Infinity

  constructor (opts: SlidingLogOptions, now: () => number = () => performance.now()) {
    this.#opts = opts
    this.#now = now
  }

  get size (): number { return this.#logs.size }

  /** The attempt of `key` just admitted is in flight: it counts until `release`, or until `holdMs` from now. */
  hold (key: string, holdMs: number): void {
    const log = this.#logs.get(key)
    const now = this.#now()
    // The newest entry at or before now is the one just counted (held entries lie ahead of now).
    const i = log ? log.findLastIndex(t => t <= now) : -1
    if (i < 0) return
    log!.splice(i, 1)
    insert(log!, now + holdMs)
  }

  /** The attempt of `key` held longest has been answered: it counts from now on, as if it came now. */
  release (key: string): void {
    const log = this.#logs.get(key)
    const now = this.#now()
    const i = log ? log.findIndex(t => t > now) : -1
    if (i < 0) return
    log!.splice(i, 1)
    insert(log!, now)
  }

  /** Count an attempt of `key` and say whether it is within the limit. */
  hit (key: string, windowMs: number, max: number): Hit {
    const now = this.#now()
    this.#sweep(now, windowMs)
    const log = this.#logs.get(key) ?? []
    this.#logs.delete(key)
    expire(log, now, windowMs)
    const admitted = log.length < max
    if (admitted || this.#opts.countRejected) {
      insert(log, now)
      if (log.length > max) log.shift()
    }
    if (log.length > 0) this.#logs.set(key, log)
    if (this.#logs.size > this.#opts.capacity) dropOldest(this.#logs, Math.ceil(this.#opts.capacity / 100))
    return { current: admitted ? log.length : max + 1, ttl: ttlOf(log, now, windowMs, max) }
  }

  /** The state of `key` without counting an attempt. */
  peek (key: string, windowMs: number, max: number): Hit {
    const now = this.#now()
    const log = (this.#logs.get(key) ?? []).filter(t => t > now - windowMs)
    return { current: log.length, ttl: ttlOf(log, now, windowMs, max) }
  }

  #sweep (now: number, windowMs: number): void {
    if (now - this.#swept < SWEEP_EVERY_MS) return
    this.#swept = now
    let dropped = 0
    for (const [key, log] of this.#logs) {
      if (dropped >= SWEEP_MAX || (log.length > 0 && log[log.length - 1]! > now - windowMs)) return
      this.#logs.delete(key)
      dropped++
    }
  }
}

/** Keep the log in time order (held entries, in the future, stay at its end). */
function insert (log: number[], t: number): void {
  let i = log.length
  while (i > 0 && log[i - 1]! > t) i--
  log.splice(i, 0, t)
}

function expire (log: number[], now: number, windowMs: number): void {
  while (log.length > 0 && log[0]! <= now - windowMs) log.shift()
}

function ttlOf (log: number[], now: number, windowMs: number, max: number): number {
  return log.length >= max ? Math.max(0, log[log.length - max]! + windowMs - now) : 0
}

type Callback = (err: Error | null, res?: { current: number, ttl: number }) => void

/**
 * A store class for @fastify/rate-limit's `store` option (its interface:
 * `incr`/`read` with `(key, cb, timeWindow, max)`, and `child(routeOptions)`
 * for each limiter made with `createRateLimit`; the plugin refuses when
 * `current > max`). Every limiter of the store shares the one log given, so
 * its owner can hold and release entries (the retry guard makes one limiter).
 */
export function slidingLogStore (log: SlidingLog) {
  return class SlidingLogStore {
    readonly log = log
    incr (key: string, cb: Callback, timeWindow: number, max: number): void {
      cb(null, this.log.hit(key, timeWindow, max))
    }

    read (key: string, cb: Callback, timeWindow: number, max: number): void {
      cb(null, this.log.peek(key, timeWindow, max))
    }

    child (): SlidingLogStore { return new SlidingLogStore() }
  }
}
