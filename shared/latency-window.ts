// p50/p99 of the last minute, cheap enough for every request: a log-scale
// histogram (buckets 5% wide, 1 µs to ~15 min) per 10 s slot, six slots in a
// ring. Observing is one index and one increment; a quantile merges the slots'
// counts. prom-client's Summary (a t-digest per observation) costs a busy lane
// far more CPU for the same figure, which only the deck and a scrape read.
// Quantiles are within one bucket (±5%) of the exact ones.
const GROWTH = Math.log(1.05)
const BUCKETS = 600 // 1.05^600 µs ≈ 15 minutes
const SLOT_MS = 10_000
const SLOTS = 6

export class LatencyWindow {
  readonly #counts = Array.from({ length: SLOTS }, () => new Float64Array(BUCKETS))
  readonly #slotOf = new Float64Array(SLOTS).fill(-1)
  readonly #now: () => number

  constructor (now: () => number = () => performance.now()) { this.#now = now }

  observe (seconds: number): void {
    const slot = Math.floor(this.#now() / SLOT_MS)
    const i = slot % SLOTS
    if (this.#slotOf[i] !== slot) { this.#counts[i]!.fill(0); this.#slotOf[i] = slot }
    const us = Math.max(1, seconds * 1e6)
    this.#counts[i]![Math.min(BUCKETS - 1, Math.floor(Math.log(us) / GROWTH))]! += 1
  }

  /** Quantiles (0-1) of the last minute in seconds; null where nothing was observed. */
  quantiles (qs: readonly number[]): Array<number | null> {
    const oldest = Math.floor(this.#now() / SLOT_MS) - SLOTS + 1
    const merged = new Float64Array(BUCKETS)
    let total = 0
    for (let s = 0; s < SLOTS; s++) {
      if (this.#slotOf[s]! < oldest) continue
      const c = this.#counts[s]!
      for (let b = 0; b < BUCKETS; b++) { merged[b]! += c[b]!; total += c[b]! }
    }
    if (total === 0) return qs.map(() => null)
    return qs.map(q => {
      const rank = q * total
      let seen = 0
      for (let b = 0; b < BUCKETS; b++) {
        seen += merged[b]!
        // The bucket's middle, in seconds.
        if (seen >= rank) return Math.exp((b + 0.5) * GROWTH) / 1e6
      }
      return Math.exp((BUCKETS - 0.5) * GROWTH) / 1e6
    })
  }
}
