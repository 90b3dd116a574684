// Open-loop load: requests are scheduled at a fixed arrival rate whatever the
// server does, and each latency is measured from the request's *scheduled* send
// time, so queueing anywhere (client pool, gateway, lane) is counted — no
// coordinated omission. Latencies go into an HDR histogram (hdr-histogram-js)
// in microseconds.
//
// Why our own scheduler on undici rather than a load tool: loadtest (the
// open-loop npm tool) measures from the actual send and keeps a 1 ms histogram,
// too coarse for a gateway that adds well under a millisecond; several mixes at
// their own rates in one process (the drill) also need a library, not a CLI.
// test/open-loop.test.ts checks that it holds its rate.
//
// Sends are woken by the event loop's timers, which run on a 1 ms clock: on an
// idle machine a send leaves p50 ~0.55 ms, p99 ~1.1 ms after its scheduled time,
// and that lag, the generator's own, is in every latency measured from the
// schedule. `sendLag` reports it beside them. (A ticker thread sleeping on
// `Atomics.wait` and posting each send as it fell due took that to p50 0.1 ms, but
// cost the drill's generator 0.31-0.35 of a core instead of 0.21-0.25, taken from
// the fleet it shares the two cores with: not kept.)
import * as hdr from 'hdr-histogram-js'

export interface OpenLoopOptions {
  /** Requests per second. */
  rate: number
  durationMs: number
  /** Sends request i; resolves to an HTTP status (or throws on a transport error). */
  send (i: number): Promise<number>
  /** Called with every answer: its scheduled send time (performance.now() clock), latency from it, status. */
  onResult? (i: number, scheduledAt: number, latencyUs: number, status: string): void
  /** Stop scheduling early (the run still waits for what it sent). */
  signal?: AbortSignal
}

export interface OpenLoopResult {
  rate: number
  scheduled: number
  completed: number
  /** status (or 'error') -> count */
  statuses: Record<string, number>
  /** Latency from scheduled send time, microseconds. */
  histogram: hdr.Histogram
  /** Achieved send rate over the run (requests/s). */
  sentRate: number
  /** Worst lag of a send behind its schedule (ms). */
  maxSendLagMs: number
  /**
   * Lag of the sends behind their schedule (ms): the generator's own share of
   * every latency (its max: maxSendLagMs).
   */
  sendLag: { p50Ms: number, p99Ms: number }
  perSecond: Array<{ second: number, count: number, p99Ms: number, errors: number }>
}

export function newHistogram (): hdr.Histogram {
  return hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: 3 })
}

export async function runOpenLoop (o: OpenLoopOptions): Promise<OpenLoopResult> {
  const n = Math.floor((o.rate * o.durationMs) / 1000)
  const interval = 1000 / o.rate
  const histogram = newHistogram()
  const lagH = newHistogram()
  const seconds = new Map<number, { h: hdr.Histogram, count: number, errors: number }>()
  const statuses: Record<string, number> = {}
  const inflight = new Set<Promise<void>>()
  let completed = 0
  let failure: { err: unknown } | undefined
  const start = performance.now()

  const fire = (i: number, scheduled: number): Promise<void> => {
    const sec = Math.floor((scheduled - start) / 1000)
    let s = seconds.get(sec)
    if (!s) { s = { h: newHistogram(), count: 0, errors: 0 }; seconds.set(sec, s) }
    const slot = s
    return o.send(i).then(status => String(status), () => 'error').then(status => {
      const us = Math.max(1, Math.round((performance.now() - scheduled) * 1000))
      histogram.recordValue(us)
      slot.h.recordValue(us)
      slot.count++
      if (status === 'error' || Number(status) >= 500) slot.errors++
      statuses[status] = (statuses[status] ?? 0) + 1
      completed++
      o.onResult?.(i, scheduled, us, status)
    })
  }

  let i = 0
  while (i < n && !o.signal?.aborted) {
    const now = performance.now()
    while (i < n && start + i * interval <= now && !o.signal?.aborted) {
      const scheduled = start + i * interval
      lagH.recordValue(Math.max(1, Math.round((now - scheduled) * 1000)))
      // Only what is still in flight is kept, not every request of the run.
      const p = fire(i, scheduled)
      inflight.add(p)
      p.then(() => inflight.delete(p), (err: unknown) => { inflight.delete(p); failure ??= { err } })
      i++
    }
    const wait = Math.max(0, Math.min(1, start + i * interval - performance.now()))
    await new Promise(resolve => setTimeout(resolve, wait))
  }
  const sentAt = performance.now()
  await Promise.all(inflight)
  if (failure) throw failure.err
  const lag = summary(lagH)
  return {
    rate: o.rate,
    scheduled: i,
    completed,
    statuses,
    histogram,
    sentRate: i / ((sentAt - start) / 1000),
    maxSendLagMs: lag.maxMs,
    sendLag: { p50Ms: lag.p50Ms, p99Ms: lag.p99Ms },
    perSecond: [...seconds.entries()].sort((a, b) => a[0] - b[0]).map(([second, s]) => ({
      second,
      count: s.count,
      p99Ms: s.h.getValueAtPercentile(99) / 1000,
      errors: s.errors,
    })),
  }
}

export function summary (h: hdr.Histogram): { p50Ms: number, p99Ms: number, maxMs: number, count: number } {
  return {
    p50Ms: h.getValueAtPercentile(50) / 1000,
    p99Ms: h.getValueAtPercentile(99) / 1000,
    maxMs: h.maxValue / 1000,
    count: h.totalCount,
  }
}
