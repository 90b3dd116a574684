// MC-RT-01's failure handling: "If recovery duration exceeds 10.0 seconds,
// trigger connection pool reset and emit P1 alert ALERT_BULKHEAD_RECOVERY_LAG".
// Recovery is measured from the moment the lane's dependency is back (the first
// success after failures: the tax provider answering, PostgreSQL handing out a
// connection again), not from leaving SATURATED: a lane can leave SATURATED
// while its provider is still down, and that is not a lag. It ends when active
// permits are back under the baseline (the spec's "< 5 active threads" for tax;
// a third of the permits by default). Past `lagMs` the lane resets its pool
// (connections stuck on a dead or black-holed server are the usual cause of
// permits that do not come back once the dependency is fine), logs and counts
// ALERT_BULKHEAD_RECOVERY_LAG, and goes on measuring: while the lag lasts,
// bulkhead_recovery_lag_seconds keeps growing and the Prometheus alert keeps
// firing; the pool is reset again at most once per `lagMs`.

export interface RecoveryOptions {
  lagMs: number
  baselineActive: number
  active: () => number
  /** Called once per lagMs while the lag lasts: reset the pool, raise the alert. */
  onLag: (lagMs: number) => void
  now?: () => number
}

/** How often a failing dependency with a probe is tried while no request tries it. */
const PROBE_EVERY_MS = 1_000

export class RecoveryWatch {
  readonly #o: Required<RecoveryOptions>
  readonly #failing = new Set<string>()
  readonly #probes = new Map<string, { run: () => Promise<unknown>, lastAt: number, running: boolean }>()
  #backAt: number | undefined
  #lastActionAt: number | undefined
  #lags = 0

  constructor (o: RecoveryOptions) {
    this.#o = { now: () => performance.now(), ...o }
  }

  /** A dependency (`provider`, `database`, ...) failed: an error, a missed deadline, no connection. */
  dependencyFailed (name: string): void {
    this.#failing.add(name)
    this.#backAt = undefined
  }

  /** A dependency answered: once every failing one has, recovery starts now. */
  dependencyOk (name: string): void {
    if (!this.#failing.delete(name) || this.#failing.size > 0) return
    this.#backAt = this.#o.now()
    this.#lastActionAt = undefined
  }

  /**
   * A way to ask a dependency whether it is back, tried once a second while it
   * is failing: the lane's own requests may no longer reach it (stuck on
   * something else), and recovery is measured from the dependency's return.
   */
  probe (name: string, run: () => Promise<unknown>): void {
    this.#probes.set(name, { run, lastAt: -Infinity, running: false })
  }

  #runProbes (now: number): void {
    for (const [name, p] of this.#probes) {
      if (!this.#failing.has(name) || p.running || now - p.lastAt < PROBE_EVERY_MS) continue
      p.running = true
      p.lastAt = now
      p.run().then(() => this.dependencyOk(name), () => {}).finally(() => { p.running = false })
    }
  }

  /** How long the lane has lagged behind its recovered dependency (0 when it has not). */
  lagMs (now = this.#o.now()): number {
    if (this.#backAt === undefined || this.#o.active() < this.#o.baselineActive) return 0
    return now - this.#backAt
  }

  /** How many times a lag past lagMs was acted on. */
  get lags (): number { return this.#lags }

  /** Called on a timer: ends the recovery when active is back under the baseline, acts on a lag. */
  tick (now = this.#o.now()): void {
    this.#runProbes(now)
    if (this.#backAt === undefined) return
    if (this.#o.active() < this.#o.baselineActive) { this.#backAt = undefined; return }
    const lag = now - this.#backAt
    if (lag < this.#o.lagMs) return
    if (this.#lastActionAt !== undefined && now - this.#lastActionAt < this.#o.lagMs) return
    this.#lastActionAt = now
    this.#lags++
    this.#o.onLag(lag)
  }
}
