// A circuit breaker in front of one outbound dependency (the tax provider: one
// in the tax lane, one in each worker that reconciles; their states may differ).
// cockatiel's CircuitBreakerPolicy keeps the states and the wait before a probe,
// and its CountBreaker decides on the last `window` calls. What it leaves to us:
// - Slow calls count as failed the moment they pass `slowCallMs`, so a hung
//   provider opens the breaker then, not at the caller's deadline; the caller
//   goes on waiting for its answer unless the breaker opens meanwhile.
// - Opening aborts the calls still in flight: their callers answer now.
// - No caller waits on a probe: while the breaker is not closed, `call` refuses
//   at once, and only the breaker's own probe reaches the dependency, one at a
//   time, `halfOpenAfterMs` after it opened; the probe's success closes it.
//   (cockatiel would make a caller the probe and queue the others behind it.)
import { circuitBreaker, CircuitState, CountBreaker, ExponentialBackoff, handleWhen, noJitterGenerator, type CircuitBreakerPolicy } from 'cockatiel'
import client from 'prom-client'

export type BreakerStateName = 'closed' | 'open' | 'half_open'
export const BREAKER_STATES: readonly BreakerStateName[] = ['closed', 'open', 'half_open']

export interface BreakerOptions {
  /** The dependency, as it appears in logs, metrics and /status. */
  dependency: string
  /** Share of the window's calls (failed or slow) that opens the breaker, in (0, 1). */
  failureRate: number
  /** How many of the last calls are weighed. */
  window: number
  /** No opening before this many calls are in the window. */
  minimumCalls: number
  /** A call still running after this long counts as failed; also a probe's deadline. */
  slowCallMs: number
  /** How long the breaker stays open before it probes. */
  halfOpenAfterMs: number
  /** When set, each failed probe doubles that wait, up to this; a close starts again from halfOpenAfterMs. */
  halfOpenMaxMs?: number
  /** One call of the breaker's own, to learn whether the dependency is back. */
  probe: (signal: AbortSignal) => Promise<unknown>
  /**
   * Whether an error is the dependency's failure (an unknown jurisdiction is an
   * answer; the caller's own abort is nothing).
   */
  isFailure: (err: unknown) => boolean
  onTransition?: (t: BreakerTransition) => void
  /** How often an open breaker looks whether its probe is due (tests shorten it). */
  tickMs?: number
}

export interface BreakerTransition { dependency: string, from: BreakerStateName, to: BreakerStateName, reason: string }

/** The breaker is not closed: the dependency was not called. */
export class BreakerOpenError extends Error {
  readonly dependency: string
  constructor (dependency: string) { super(`the ${dependency} breaker is open`); this.name = 'BreakerOpenError'; this.dependency = dependency }
}

class SlowCall extends Error {
  constructor (ms: number) { super(`no answer within ${ms} ms`); this.name = 'SlowCall' }
}

const NAMES: Record<CircuitState, BreakerStateName> = {
  [CircuitState.Closed]: 'closed',
  [CircuitState.Open]: 'open',
  [CircuitState.HalfOpen]: 'half_open',
  [CircuitState.Isolated]: 'open',
}

export class DependencyBreaker {
  readonly #o: BreakerOptions
  readonly #policy: CircuitBreakerPolicy
  #state: BreakerStateName = 'closed'
  #since = Date.now()
  #lastReason = ''
  /** Aborted when the breaker opens: every call made while it was closed listens to it. */
  #closedEpoch = new AbortController()
  #timer: NodeJS.Timeout | undefined
  #probing = false
  readonly counts = {
    shortCircuited: 0, probes: 0, transitions: { closed: 0, open: 0, half_open: 0 } as Record<BreakerStateName, number>,
  }

  constructor (o: BreakerOptions) {
    this.#o = o
    this.#policy = circuitBreaker(handleWhen(err => err instanceof SlowCall || o.isFailure(err)), {
      halfOpenAfter: o.halfOpenMaxMs && o.halfOpenMaxMs > o.halfOpenAfterMs
        ? new ExponentialBackoff({
          generator: noJitterGenerator, initialDelay: o.halfOpenAfterMs, maxDelay: o.halfOpenMaxMs,
        })
        : o.halfOpenAfterMs,
      breaker: new CountBreaker({ threshold: o.failureRate, size: o.window, minimumNumberOfCalls: o.minimumCalls }),
    })
    this.#policy.onBreak(r => { this.#lastReason = 'error' in r ? r.error.message : 'isolated' in r ? 'isolated' : 'a failed result' })
    this.#policy.onStateChange(s => { this.#moved(NAMES[s]) })
  }

  get dependency (): string { return this.#o.dependency }
  get state (): BreakerStateName { return this.#state }
  /** When the breaker entered its state (ms since the epoch). */
  get since (): number { return this.#since }
  get closed (): boolean { return this.#state === 'closed' }

  /** Whether a call may go to the dependency now; a refusal is counted as short-circuited. */
  admits (): boolean {
    if (this.#policy.state === CircuitState.Closed) return true
    this.counts.shortCircuited++
    return false
  }

  /**
   * Call the dependency through the breaker. `fn` gets a signal that fires if
   * the breaker opens before it is done; it must stop then, rejecting with the
   * signal's reason.
   */
  async call<T> (fn: (opened: AbortSignal) => Promise<T>): Promise<T> {
    if (!this.admits()) throw new BreakerOpenError(this.#o.dependency)
    const opened = this.#closedEpoch.signal
    const running = fn(opened)
    running.catch(() => {})
    // The breaker weighs the call when it ends or passes slowCallMs, whichever
    // is first; the caller waits for the call itself.
    await this.#policy.execute(() => this.#slowAt(running, this.#o.slowCallMs)).catch(() => {})
    // A call cut by the opening rejects with the signal's reason, BreakerOpenError.
    return await running
  }

  /** Start looking for the probe's turn while open. */
  start (): this {
    this.#timer ??= setInterval(() => { this.#maybeProbe() }, this.#o.tickMs ?? 200)
    this.#timer.unref()
    return this
  }

  stop (): void {
    clearInterval(this.#timer)
    this.#timer = undefined
  }

  status (): {
    dependency: string
    state: BreakerStateName
    since: string
    lastReason: string | null
    shortCircuited: number
    probes: number
  } {
    return {
      dependency: this.#o.dependency,
      state: this.#state,
      since: new Date(this.#since).toISOString(),
      lastReason: this.#lastReason || null,
      shortCircuited: this.counts.shortCircuited,
      probes: this.counts.probes,
    }
  }

  #slowAt<T> (p: Promise<T>, ms: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const t = setTimeout(() => { reject(new SlowCall(ms)) }, ms)
      p.then(v => { clearTimeout(t); resolve(v) }, err => { clearTimeout(t); reject(err) })
    })
  }

  #maybeProbe (): void {
    if (this.#probing || this.#policy.state !== CircuitState.Open) return
    this.#probing = true
    // cockatiel refuses (BrokenCircuitError, nothing called) until halfOpenAfter
    // has passed; then this call is its half-open probe.
    const ac = new AbortController()
    this.#policy.execute(() => {
      this.counts.probes++
      const t = setTimeout(() => { ac.abort(new SlowCall(this.#o.slowCallMs)) }, this.#o.slowCallMs)
      return this.#o.probe(ac.signal)
        .finally(() => { clearTimeout(t) })
        .catch(err => { throw ac.signal.aborted ? ac.signal.reason : err })
    }).catch(() => {}).finally(() => { this.#probing = false })
  }

  #moved (to: BreakerStateName): void {
    const from = this.#state
    if (from === to) return
    this.#state = to
    this.#since = Date.now()
    this.counts.transitions[to]++
    if (to === 'open') {
      this.#closedEpoch.abort(new BreakerOpenError(this.#o.dependency))
      this.#closedEpoch = new AbortController()
    }
    const reason = to === 'open' ? this.#lastReason : to === 'half_open' ? 'probing' : 'a probe answered'
    this.#o.onTransition?.({ dependency: this.#o.dependency, from, to, reason })
  }
}

/** Several breakers as one state: closed when every one is, open when any is, else half-open; null for none. */
export function breakersState (breakers: readonly DependencyBreaker[]): BreakerStateName | null {
  if (breakers.length === 0) return null
  if (breakers.every(b => b.state === 'closed')) return 'closed'
  return breakers.some(b => b.state === 'open') ? 'open' : 'half_open'
}

/**
 * The breaker's series in a process's registry: its state (1 on the current
 * one), its transitions, the calls it answered without the dependency.
 */
export function breakerMetrics (registry: client.Registry, breakers: () => readonly DependencyBreaker[]): void {
  // Counters read from the breaker's own counts at scrape time.
  const reported = new Map<string, number>()
  const add = (c: client.Counter<string>, key: string, labels: Record<string, string>, now: number): void => {
    c.inc(labels, Math.max(0, now - (reported.get(key) ?? 0)))
    reported.set(key, now)
  }
  new client.Gauge({
    name: 'dependency_breaker_state',
    help: 'The circuit breaker of an outbound dependency: 1 on its current state (closed, open, half_open)',
    labelNames: ['dependency', 'state'],
    registers: [registry],
    collect () {
      for (const b of breakers()) {
        for (const s of BREAKER_STATES) this.set({ dependency: b.dependency, state: s }, b.state === s ? 1 : 0)
      }
    },
  })
  new client.Counter({
    name: 'dependency_breaker_transitions_total',
    help: 'Circuit breaker transitions of an outbound dependency, by the state entered',
    labelNames: ['dependency', 'to'],
    registers: [registry],
    collect () {
      for (const b of breakers()) for (const s of BREAKER_STATES) add(this, `${b.dependency}:${s}`, { dependency: b.dependency, to: s }, b.counts.transitions[s])
    },
  })
  new client.Counter({
    name: 'dependency_breaker_short_circuited_total',
    help: 'Calls the breaker answered without calling the dependency (it was not closed)',
    labelNames: ['dependency'],
    registers: [registry],
    collect () {
      for (const b of breakers()) add(this, b.dependency, { dependency: b.dependency }, b.counts.shortCircuited)
    },
  })
}
