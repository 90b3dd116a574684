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
// One tenant alone gets exactly the plain FIFO bulkhead. State is kept for the
// tenants with something in flight (and, until a sweep, as many idle ones); a
// decision looks at no more tenants than the queue has places. A tenant's
// weight (default 1) scales its share: "holds the fewest" and "has the most"
// compare permits per unit of weight.
//
// Fair queuing alone cannot help when the hog's work is slow (its card rows
// locked, its provider stalled): it holds every permit, and the others get one
// only as often as one of its comes back. So `reserve` guarantees a little:
// while another tenant is in flight, the last `reserve` free permits are not
// taken by a tenant already holding its share (permits x its weight / the
// weights in flight); it waits in the queue (or, with no queue, is refused).
// A tenant alone still gets every permit.

import { cancellationOf, type Cancellation } from './cancellation.ts'

export type RejectReason = 'queue_full' | 'queue_timeout' | 'fail_fast' | 'aborted'

/** Where a refused request's tenant stood, when another tenant was in flight too. */
export interface FairShare {
  readonly tenant: string
  /** Permits its tenant held, and places it had in the queue. */
  readonly held: number
  readonly queued: number
  /** Its share of the permits among the tenants in flight, by weight (not rounded). */
  readonly share: number
  /** Tenants in flight, its own included. */
  readonly tenants: number
  /** It was already queued and gave its place to a tenant holding less. */
  readonly displaced: boolean
}

export class BulkheadRejected extends Error {
  readonly reason: RejectReason
  /** Set when other tenants were in flight: the refused one's load and share. */
  readonly fair: FairShare | undefined
  constructor (reason: RejectReason, fair?: FairShare) {
    super(`bulkhead rejected: ${reason}`)
    this.name = 'BulkheadRejected'
    this.reason = reason
    this.fair = fair
  }
}

/** A tenant's load in the bulkhead, for /status and the deck. */
export interface TenantLoad {
  readonly tenant: string
  readonly held: number
  readonly queued: number
  readonly share: number
}

export interface Permit {
  /** Idempotent: the second and later calls do nothing. */
  release (): void
  /** Milliseconds spent waiting in the queue (0 when admitted at once). */
  readonly waitedMs: number
}

interface Tenant {
  readonly name: string
  readonly weight: number
  /** Something in flight; an idle tenant stays in the map until the next sweep. */
  live: boolean
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
  /** A tenant's weight (> 0); default 1 for every tenant. */
  weight?: (tenant: string) => number
  /** Free permits kept, while another tenant is in flight, from a tenant already at its share. Default 0. */
  reserve?: number
}

export class Bulkhead {
  readonly permits: number
  readonly queueCapacity: number
  readonly queueWaitMs: number
  #active = 0
  #queued = 0
  /** Tenants holding a permit or waiting for one. */
  readonly #tenants = new Map<string, Tenant>()
  /** Tenants in the map with nothing in flight, swept once they outnumber the live ones. */
  #idle = 0
  /** Tenants with waiters, in the order they are served (round-robin). */
  readonly #ready = new Map<string, Tenant>()
  /** The weights of the tenants in flight, summed. */
  #weights = 0
  /** Waiters that gave their place to a tenant holding less. */
  displaced = 0
  /**
   * Requests refused while their tenant was at or over its share and another
   * tenant was in flight (displaced ones included).
   */
  fairShed = 0
  readonly reserve: number
  readonly #weight: (tenant: string) => number
  #onChange: ((active: number, queued: number) => void) | undefined

  constructor (opts: BulkheadOptions) {
    this.permits = opts.permits
    this.queueCapacity = opts.queue
    this.queueWaitMs = opts.queueWaitMs
    this.reserve = Math.max(0, Math.min(opts.reserve ?? 0, opts.permits - 1))
    this.#weight = opts.weight ?? (() => 1)
    this.#onChange = opts.onChange
  }

  get active (): number { return this.#active }
  get queued (): number { return this.#queued }
  /** How many tenants hold a permit or wait for one. */
  get tenantsInFlight (): number { return this.#tenants.size - this.#idle }
  /** Tenants whose state is kept: those in flight and idle ones not swept yet (at most 64 or as many as in flight). */
  get tenantsKept (): number { return this.#tenants.size }

  /**
   * Take a permit without waiting, or null. A free permit while others wait
   * means every waiter is kept from the reserve (#pump), so an arrival the
   * reserve does not keep overtakes nobody who could have had it.
   */
  tryAcquire (tenant = ''): Permit | null {
    if (this.#active < this.permits && (this.#queued === 0 || this.reserve > 0) && !this.#reserved(tenant)) {
      this.#active++
      const t = this.#tenant(tenant)
      t.held++
      this.#changed()
      return this.#permit(t, 0)
    }
    return null
  }

  /** The free permits left are the reserve, another tenant is in flight, and this one already holds its share. */
  #reserved (tenant: string): boolean {
    const t = this.#live(tenant)
    return t !== undefined && this.#keptFrom(t)
  }

  // held >= permits x weight / weights, as held / weight >= permits / weights:
  // the quantity the hand-over minimises, so if the tenant it picks is kept
  // from the reserve, every waiting tenant is.
  #keptFrom (t: Tenant): boolean {
    if (this.permits - this.#active > this.reserve || this.tenantsInFlight < 2) return false
    return t.held / t.weight >= this.permits / this.#weights
  }

  /**
   * The refusal of a request of `name`, with its tenant's standing when others
   * are in flight: its tenant and the one it is refused for (a displacement's
   * arrival) are counted even when they have nothing in flight yet.
   */
  #refusal (reason: RejectReason, name: string, displacedFor?: string): BulkheadRejected {
    let tenants = this.tenantsInFlight
    let weights = this.#weights
    const w = (n: string): number => {
      const t = this.#live(n)
      if (t) return t.weight
      tenants++
      const x = this.#weight(n)
      weights += x
      return x
    }
    const mine = w(name)
    if (displacedFor !== undefined) w(displacedFor)
    if (tenants < 2) return new BulkheadRejected(reason)
    const t = this.#live(name)
    const displaced = displacedFor !== undefined
    const fair: FairShare = {
      tenant: name,
      held: t?.held ?? 0,
      queued: t?.queue.length ?? 0,
      share: this.permits * mine / weights,
      tenants,
      displaced,
    }
    if (displaced || fair.held + fair.queued >= fair.share) this.fairShed++
    return new BulkheadRejected(reason, fair)
  }

  /** The `n` tenants holding the most permits (then places), heaviest first. */
  top (n: number): TenantLoad[] {
    const all: TenantLoad[] = []
    for (const t of this.#tenants.values()) {
      if (!t.live) continue
      const share = this.permits * t.weight / this.#weights
      all.push({ tenant: t.name, held: t.held, queued: t.queue.length, share })
    }
    return all.sort((a, b) => (b.held - a.held) || (b.queued - a.queued)).slice(0, n)
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
    if (this.queueCapacity === 0) return Promise.reject(this.#refusal('fail_fast', tenant))
    if (this.#queued >= this.queueCapacity && !this.#displaceFor(tenant)) return Promise.reject(this.#refusal('queue_full', tenant))
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
   * newest waiter of the tenant with the most permits and places per unit of
   * weight, if that one would still have at least the arrival's tenant's with
   * it. False: no room.
   */
  #displaceFor (tenant: string): boolean {
    const mine = this.#live(tenant)
    const arriving = ((mine?.held ?? 0) + (mine?.queue.length ?? 0) + 1) / (mine?.weight ?? this.#weight(tenant))
    let hog: Tenant | undefined
    let most = 0
    for (const t of this.#ready.values()) {
      const load = (t.held + t.queue.length) / t.weight
      if (load > most) { most = load; hog = t }
    }
    if (!hog || hog === mine || most - 1 / hog.weight < arriving) return false
    this.displaced++
    this.#dropWaiter(hog.queue.at(-1)!, 'queue_full', tenant)
    return true
  }

  /** The tenant of `name` if it has something in flight. */
  #live (name: string): Tenant | undefined {
    const t = this.#tenants.get(name)
    return t?.live === true ? t : undefined
  }

  #tenant (name: string): Tenant {
    let t = this.#tenants.get(name)
    if (!t) {
      t = { name, weight: this.#weight(name), live: false, held: 0, queue: [] }
      this.#tenants.set(name, t)
      this.#idle++
    }
    if (!t.live) {
      t.live = true
      this.#idle--
      this.#weights += t.weight
    }
    return t
  }

  // A tenant with nothing in flight is marked idle, not deleted: V8's Map keeps
  // a deleted entry in its key's hash chain until the table is rebuilt, so one
  // merchant entering and leaving a large map makes each lookup of it walk
  // thousands of dead entries. Idle ones are swept together once
  // they outnumber the live ones, so memory stays within twice what is in flight.
  #tidy (t: Tenant): void {
    if (t.queue.length === 0) this.#ready.delete(t.name)
    if (t.held === 0 && t.queue.length === 0 && t.live) {
      t.live = false
      this.#idle++
      this.#weights -= t.weight
      if (this.#idle > 64 && this.#idle > this.#tenants.size - this.#idle) {
        for (const [name, x] of this.#tenants) if (!x.live) this.#tenants.delete(name)
        this.#idle = 0
      }
    }
  }

  /** `displacedFor`: the tenant of the arrival it gives its place to. */
  #dropWaiter (w: Waiter, reason: RejectReason, displacedFor?: string): void {
    if (w.done) return
    const q = w.tenant.queue
    const i = q.indexOf(w)
    // Its standing is taken with its own place still counted. A waiter that timed
    // out beside a free permit was kept from the reserve: refused for its share.
    const kept = reason === 'queue_timeout' && this.#active < this.permits
    const refusal = displacedFor !== undefined
      ? this.#refusal(reason, w.tenant.name, displacedFor)
      : kept ? this.#refusal(reason, w.tenant.name) : new BulkheadRejected(reason)
    if (i >= 0) { q.splice(i, 1); this.#queued-- }
    this.#tidy(w.tenant)
    this.#settle(w)
    w.reject(refusal)
    // One tenant fewer in flight can free a waiter the reserve kept.
    if (this.reserve > 0) this.#pump()
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
        this.#active--
        this.#pump()
        this.#changed()
      },
    }
  }

  // Free permits go straight to waiters, so no arrival can overtake one: the
  // oldest waiter of the waiting tenant that holds the fewest permits per unit
  // of weight, the earliest in turn among equals; a tenant served goes to the
  // back of the turn if it has more waiting. (The turn has at most one tenant
  // per place.) Stops at a tenant the reserve keeps from the permit.
  #pump (): void {
    while (this.#active < this.permits) {
      let t: Tenant | undefined
      for (const x of this.#ready.values()) if (!t || x.held / x.weight < t.held / t.weight) t = x
      if (!t || this.#keptFrom(t)) return
      const next = t.queue.shift()!
      this.#queued--
      this.#active++
      t.held++
      this.#ready.delete(t.name)
      if (t.queue.length > 0) this.#ready.set(t.name, t)
      this.#settle(next)
      next.resolve(this.#permit(t, tryNow() - next.enqueuedAt))
    }
  }

  #changed (): void {
    this.#onChange?.(this.#active, this.#queued)
  }
}

function tryNow (): number { return performance.now() }
