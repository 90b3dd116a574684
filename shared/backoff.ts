// The fleet's one retry delay: exponential in the number of tries that failed,
// capped. With equal jitter half the delay is fixed and half random: a burst of
// failures does not come back as one synchronized burst of retries, and no delay
// falls near zero.
export interface Backoff {
  /** The delay after the first failure. */
  baseMs: number
  /** No delay is longer. */
  capMs: number
  /** 'equal': between half the delay and all of it; 'none': exactly it. */
  jitter: 'equal' | 'none'
  random?: () => number
}

/** The delay after `failures` failed tries (1: after the first; 0 counts as 1). */
export function backoffMs (failures: number, b: Backoff): number {
  const ceiling = Math.min(b.capMs, b.baseMs * 2 ** Math.max(0, failures - 1))
  return b.jitter === 'none' ? ceiling : ceiling / 2 + (b.random ?? Math.random)() * (ceiling / 2)
}
