// The admission bulkhead: N permits and a bounded FIFO queue with a wait budget.
// Every decision is synchronous bookkeeping (no I/O, no lock), so a rejection is
// decided in microseconds — INV-BH-02 asks for < 5 ms. A permit is released
// exactly once whatever happens to the work (error, abort, disconnect, deadline).

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

interface Waiter {
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
  #queue: Waiter[] = []
  #onChange: ((active: number, queued: number) => void) | undefined

  constructor (opts: BulkheadOptions) {
    this.permits = opts.permits
    this.queueCapacity = opts.queue
    this.queueWaitMs = opts.queueWaitMs
    this.#onChange = opts.onChange
  }

  get active (): number { return this.#active }
  get queued (): number { return this.#queue.length }

  /** Take a permit without waiting, or null. */
  tryAcquire (): Permit | null {
    if (this.#active < this.permits && this.#queue.length === 0) {
      this.#active++
      this.#changed()
      return this.#permit(0)
    }
    return null
  }

  /**
   * Take a permit: at once when one is free, else wait in the FIFO queue for at
   * most queueWaitMs. Rejects at once when the queue is full (or has no room at all).
   */
  acquire (stop?: Cancellation | AbortSignal): Promise<Permit> {
    const signal = stop === undefined ? undefined : cancellationOf(stop)
    if (signal?.aborted) return Promise.reject(new BulkheadRejected('aborted'))
    const now = tryNow()
    const p = this.tryAcquire()
    if (p) return Promise.resolve(p)
    if (this.#queue.length >= this.queueCapacity) {
      return Promise.reject(new BulkheadRejected(this.queueCapacity === 0 ? 'fail_fast' : 'queue_full'))
    }
    return new Promise<Permit>((resolve, reject) => {
      const w: Waiter = { resolve, reject, timer: undefined, enqueuedAt: now, off: undefined, done: false }
      w.timer = setTimeout(() => this.#dropWaiter(w, 'queue_timeout'), this.queueWaitMs)
      if (signal) w.off = signal.onAbort(() => this.#dropWaiter(w, 'aborted'))
      this.#queue.push(w)
      this.#changed()
    })
  }

  #dropWaiter (w: Waiter, reason: RejectReason): void {
    if (w.done) return
    const i = this.#queue.indexOf(w)
    if (i >= 0) this.#queue.splice(i, 1)
    this.#settle(w)
    w.reject(new BulkheadRejected(reason))
    this.#changed()
  }

  #settle (w: Waiter): void {
    w.done = true
    if (w.timer) clearTimeout(w.timer)
    w.off?.()
  }

  #permit (waitedMs: number): Permit {
    let released = false
    return {
      waitedMs,
      release: () => {
        if (released) return
        released = true
        this.#handOver()
      },
    }
  }

  // A released permit goes straight to the head of the queue, so FIFO order holds
  // and no arrival can overtake a waiter.
  #handOver (): void {
    const next = this.#queue.shift()
    if (next) {
      this.#settle(next)
      next.resolve(this.#permit(tryNow() - next.enqueuedAt))
    } else {
      this.#active--
    }
    this.#changed()
  }

  #changed (): void {
    this.#onChange?.(this.#active, this.#queue.length)
  }
}

function tryNow (): number { return performance.now() }
