// Why a piece of work must stop, as a plain list of callbacks. A lane gives every
// request one (its deadline, its client gone, its end); an AbortController there
// costs a busy lane a visible share of its CPU (an EventTarget per request and an
// Event dispatched at every end). The lane's own machinery
// (admission, the execution's connections, the group-commit write) listens here,
// and an AbortSignal is made only for code that asks for one (a provider call).

export interface Cancellation {
  readonly aborted: boolean
  readonly reason: unknown
  /** Calls fn once when stopped (at once if it already is); returns what removes it. */
  onAbort (fn: (reason: unknown) => void): () => void
}

const NOTHING = (): void => {}

export class Canceller implements Cancellation {
  #aborted = false
  #reason: unknown = undefined
  #fns: Array<((reason: unknown) => void) | undefined> = []
  #ac: AbortController | undefined

  get aborted (): boolean { return this.#aborted }
  get reason (): unknown { return this.#reason }

  onAbort (fn: (reason: unknown) => void): () => void {
    if (this.#aborted) { fn(this.#reason); return NOTHING }
    const fns = this.#fns
    const i = fns.push(fn) - 1
    return () => { fns[i] = undefined }
  }

  /**
   * Stops: every callback once, in the order they came; later calls do nothing.
   * A callback that throws does not keep the others from running: its error is
   * thrown on the next tick, as an EventTarget listener's is.
   */
  abort (reason: unknown): void {
    if (this.#aborted) return
    this.#aborted = true
    this.#reason = reason
    const fns = this.#fns
    this.#fns = []
    for (const fn of fns) {
      try { fn?.(reason) } catch (err) { process.nextTick(() => { throw err }) }
    }
    this.#ac?.abort(reason)
  }

  /** An AbortSignal that follows this, made on first use. */
  get signal (): AbortSignal {
    if (!this.#ac) {
      this.#ac = new AbortController()
      if (this.#aborted) this.#ac.abort(this.#reason)
    }
    return this.#ac.signal
  }
}

/** An AbortSignal seen as a Cancellation (for callers that have a signal). */
export function cancellationOf (c: Cancellation | AbortSignal): Cancellation {
  if (!(c instanceof AbortSignal)) return c
  return {
    get aborted () { return c.aborted },
    get reason () { return c.reason as unknown },
    onAbort (fn) {
      if (c.aborted) { fn(c.reason); return NOTHING }
      const listener = (): void => fn(c.reason)
      c.addEventListener('abort', listener, { once: true })
      return () => c.removeEventListener('abort', listener)
    },
  }
}
