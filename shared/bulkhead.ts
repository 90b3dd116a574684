// The admission bulkhead: N permits and a bounded queue with a wait budget.
// Every decision is synchronous bookkeeping (no I/O, no lock), so a rejection is
// decided in microseconds — INV-BH-02 asks for < 5 ms. A permit is released
// exactly once whatever happens to the work (error, abort, disconnect, deadline).
//
// Fair between tenants (merchants, API clients) when contended, as Kubernetes'
// API Priority and Fairness queues per flow: a free permit goes to an arrival
// at once whoever it is (work-conserving); a released permit goes to the
// waiting tenant holding the fewest, round-robin among equals, FIFO within
// one tenant; and an arrival that finds the queue full
// displaces the newest waiter of the tenant with the most permits and places,
// if that tenant would still have more than the arrival's, else it is refused.
// One tenant alone gets exactly the plain FIFO bulkhead. State is kept only for
// tenants with something in flight; a decision looks at no more tenants than
// the queue has places.

import { cancellationOf, type Cancellation } from './cancellation.ts'

export type RejectReason = 'queue_full' | 'queue_timeout' | 'fail_fast' | 'aborted'

export class BulkheadRejected extends Error {
  readonly reason: RejectReason
  constructor (reason: RejectReason) {
    super(`bulkhead rejected: ${reason}`)
    this.name = 'BulkheadRejected'
    this.reason = reason
  }
}

export interface Permit {
  /** Idempotent: the second and later calls do nothing. */
  release (): void
  /** Milliseconds spent waiting in the queue (0 when admitted at once). */
  readonly waitedMs: number
}

interface Tenant {
  readonly name: string
  /** Permits it holds. */
  held: number
  /** Its waiters, oldest first. */
  readonly queue: Waiter[]
}

interface Waiter {
  tenant: Tenant
  resolve (p: Permit): void
  reject (e: BulkheadRejected): void
  timer: NodeJS.Timeout | undefined
  enqueuedAt: number
  /** Removes the waiter's abort callback. */
  off: (() => void) | undefined
  done: boolean
}

export interface BulkheadOptions {
  permits: number
  queue: number
  queueWaitMs: number
  /** Called after every change of active/queued counts. */
  onChange?: (active: number, queued: number) => void
}

export class Bulkhead {
  readonly permits: number
  readonly queueCapacity: number
  readonly queueWaitMs: number
  #active = 0
  #queued = 0
  /** Tenants holding a permit or waiting for one. */
  readonly #tenants = new Map<string, Tenant>()
  /** Tenants with waiters, in the order they are served (round-robin). */
  readonly #ready = new Map<string, Tenant>()
  /** Waiters that gave their place to a tenant holding less. */
  displaced = 0
  #onChange: ((active: number, queued: number) => void) | undefined

  constructor (opts: BulkheadOptions) {
    this.permits = opts.permits
    this.queueCapacity = opts.queue
    this.queueWaitMs = opts.queueWaitMs
    this.#onChange = opts.onChange
  }

  get active (): number { return this.#active }
  get queued (): number { return this.#queued }
  /** How many tenants hold a permit or wait for one. */
  get tenantsInFlight (): number { return this.#tenants.size }

  /** Take a permit without waiting, or null. */
  tryAcquire (tenant = ''): Permit | null {
    if (this.#active < this.permits && this.#queued === 0) {
      this.#active++
      const t = this.#tenant(tenant)
      t.held++
      this.#changed()
      return this.#permit(t, 0)
    }
    return null
  }

  /**
   * Take a permit: at once when one is free, else wait in the FIFO queue for at
   * most queueWaitMs. Rejects at once when the queue is full (or has no room at all).
   */
  acquire (stop?: Cancellation | AbortSignal, tenant = ''): Promise<Permit> {
    const signal = stop === undefined ? undefined : cancellationOf(stop)
    if (signal?.aborted) return Promise.reject(new BulkheadRejected('aborted'))
    const now = tryNow()
    const p = this.tryAcquire(tenant)
    if (p) return Promise.resolve(p)
    if (this.queueCapacity === 0) return Promise.reject(new BulkheadRejected('fail_fast'))
    if (this.#queued >= this.queueCapacity && !this.#displaceFor(tenant)) return Promise.reject(new BulkheadRejected('queue_full'))
    return new Promise<Permit>((resolve, reject) => {
      const t = this.#tenant(tenant)
      const w: Waiter = { tenant: t, resolve, reject, timer: undefined, enqueuedAt: now, off: undefined, done: false }
      w.timer = setTimeout(() => this.#dropWaiter(w, 'queue_timeout'), this.queueWaitMs)
      if (signal) w.off = signal.onAbort(() => this.#dropWaiter(w, 'aborted'))
      t.queue.push(w)
      this.#queued++
      if (!this.#ready.has(t.name)) this.#ready.set(t.name, t)
      this.#changed()
    })
  }

  /**
   * The queue is full: make room for an arrival of `tenant` by refusing the
   * newest waiter of the tenant with the most permits and places, if that one
   * would still hold more than the arrival's tenant with it. False: no room.
   */
  #displaceFor (tenant: string): boolean {
    const mine = this.#tenants.get(tenant)
    const arriving = (mine?.held ?? 0) + (mine?.queue.length ?? 0) + 1
    let hog: Tenant | undefined
    let most = 0
    for (const t of this.#ready.values()) {
      const load = t.held + t.queue.length
      if (load > most) { most = load; hog = t }
    }
    if (!hog || hog === mine || most - 1 < arriving) return false
    this.displaced++
    this.#dropWaiter(hog.queue.at(-1)!, 'queue_full')
    return true
  }

  #tenant (name: string): Tenant {
    let t = this.#tenants.get(name)
    if (!t) { t = { name, held: 0, queue: [] }; this.#tenants.set(name, t) }
    return t
  }

  /** Forget a tenant with nothing in flight. */
  #tidy (t: Tenant): void {
    if (t.queue.length === 0) this.#ready.delete(t.name)
    if (t.held === 0 && t.queue.length === 0) this.#tenants.delete(t.name)
  }

  #dropWaiter (w: Waiter, reason: RejectReason): void {
    if (w.done) return
    const q = w.tenant.queue
    const i = q.indexOf(w)
    if (i >= 0) { q.splice(i, 1); this.#queued-- }
    this.#tidy(w.tenant)
    this.#settle(w)
    w.reject(new BulkheadRejected(reason))
    this.#changed()
  }

  #settle (w: Waiter): void {
    w.done = true
    if (w.timer) clearTimeout(w.timer)
    w.off?.()
  }

  #permit (t: Tenant, waitedMs: number): Permit {
    let released = false
    return {
      waitedMs,
      release: () => {
        if (released) return
        released = true
        t.held--
        this.#tidy(t)
        this.#handOver()
      },
    }
  }

  // A released permit goes straight to a waiter, so no arrival can overtake
  // one: the oldest waiter of the waiting tenant that holds the fewest permits,
  // the earliest in turn among equals; a tenant served goes to the back of the
  // turn if it has more waiting. (The turn has at most one tenant per place.)
  #handOver (): void {
    let t: Tenant | undefined
    for (const x of this.#ready.values()) if (!t || x.held < t.held) t = x
    if (t) {
      const next = t.queue.shift()!
      this.#queued--
      t.held++
      this.#ready.delete(t.name)
      if (t.queue.length > 0) this.#ready.set(t.name, t)
      this.#settle(next)
      next.resolve(this.#permit(t, tryNow() - next.enqueuedAt))
    } else {
      this.#active--
    }
    this.#changed()
  }

  #changed (): void {
    this.#onChange?.(this.#active, this.#queued)
  }
}

function tryNow (): number { return performance.now() }
