// Retry delay: exponential in the attempt number, capped, with full jitter so a
// burst of failures does not come back as a synchronized burst of retries.
export function backoffMs (attempt: number, o: { baseMs?: number, capMs?: number, random?: () => number } = {}): number {
  const base = o.baseMs ?? 1_000
  const cap = o.capMs ?? 5 * 60_000
  const ceiling = Math.min(cap, base * 2 ** Math.max(0, attempt - 1))
  // Half fixed, half random: never zero, never above the ceiling.
  return Math.round(ceiling / 2 + (o.random ?? Math.random)() * (ceiling / 2))
}
