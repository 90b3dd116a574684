// Giving memory back at idle. V8 grows a process's young generation (two
// semi-spaces) while it allocates fast, as every process does while it loads
// and under load, and shrinks it again only in a full garbage collection at a
// low allocation rate. A process that goes idle collects nothing, and V8's own
// memory reducer starts only after a collection that happened to shrink the
// heap, so an idle process can keep memory it no longer uses, resident, for as
// long as it stays idle (docs/benchmarks.md, "Memory at idle").
//
// So each long-running process checks its event loop every `idleMs`: after a
// whole window under `maxUtilization` busy, with a young generation grown past
// its initial size, it runs one full collection, and V8 shrinks the young
// generation. A full collection compacts only part of the old generation's
// pages it emptied, so while the heap commits SLACK_BYTES more than it uses and
// the last collection made it smaller, the check runs one more per idle window.
// Each pause falls where there is nothing to delay; under load the check never
// fires. A collection that gave nothing back waits twice as long before the
// next try (up to MAX_BACKOFF_MS).
import { performance } from 'node:perf_hooks'
import v8 from 'node:v8'
import { Type } from 'typebox'
import { loadConfig } from './config.ts'

export interface IdleTrimOptions {
  /** Length of the idle window, and how often it is checked. */
  idleMs: number
  /** Busy share of the event loop under which a window counts as idle. */
  maxUtilization?: number
  /** Called after each collection, e.g. to log it. */
  onTrim?: (t: {
    pauseMs: number
    newSpaceBeforeMb: number
    newSpaceAfterMb: number
    heapUsedBeforeMb: number
    heapUsedAfterMb: number
    heapTotalBeforeMb: number
    heapTotalAfterMb: number
  }) => void
}

const MB = 1024 * 1024
const MAX_BACKOFF_MS = 600_000

/** What the idle check did in this process, for its /metrics (shared/metrics.ts). */
export const idleTrimStats = { collections: 0, pauseSeconds: 0, freedBytes: 0 }

/**
 * The check's two collections, with the `gc` that `node --expose-gc` gives (every
 * launcher of the fleet passes it: npm start, the supervisor's children, the
 * image's entrypoint; V8 flags set after start-up are documented as
 * unpredictable): `trim`, which gives the young generation back and collects the
 * old one, and `compact`, one more full collection. The call that runs a full
 * collection depends on V8:
 * - V8 12+ (Node 22, 24): `{ type: 'major', execution: 'sync' }`;
 * - V8 11 (Node 20): `gc()` with no argument. There the options object runs a
 *   young collection whatever `type` says, so the old generation would never
 *   be collected.
 * Not used: V8 12's `flavor: 'last-resort'`, which also compacts the old
 * generation and unmaps what it freed, at a pause several times a major
 * collection's: too long for a lane that may be answering a request.
 */
function exposedGc (): { trim: () => void, compact: () => void } | undefined {
  const gc: unknown = (globalThis as { gc?: unknown }).gc
  if (typeof gc !== 'function') return undefined
  const full = gc as (o?: { type: 'major', execution: 'sync' }) => void
  if (Number(process.versions.v8.split('.')[0]) >= 12) {
    const major = (): void => full({ type: 'major', execution: 'sync' })
    return { trim: major, compact: major }
  }
  // Node 20: the call this module made before, which is what gives the young
  // generation back there, then the full collection.
  return { trim: () => { full({ type: 'major', execution: 'sync' }); full() }, compact: () => full() }
}

function newSpaceBytes (): number {
  return v8.getHeapSpaceStatistics().find(s => s.space_name === 'new_space')?.space_size ?? 0
}

/** Heap committed over what it uses, past which the check goes on compacting at idle. */
const SLACK_BYTES = 8 * MB

/**
 * Starts the idle check; returns a stop function. A no-op when `idleMs` is 0,
 * or (said in one line) without `--expose-gc`.
 */
export function startIdleTrim (opts: IdleTrimOptions): () => void {
  if (opts.idleMs <= 0) return () => {}
  const gc = exposedGc()
  if (!gc) {
    console.error(JSON.stringify({ level: 'warn', msg: 'idle trim off: start node with --expose-gc to give memory back at idle, or set IDLE_TRIM_SECONDS=0 to silence this' }))
    return () => {}
  }
  const maxUtilization = opts.maxUtilization ?? 0.02
  // The young generation's initial size (1 MB on Node 20–24), then its size after each collection that shrank it.
  let floor = Math.min(newSpaceBytes(), MB)
  let last = performance.eventLoopUtilization()
  let wait = opts.idleMs
  let idleSince = Date.now()
  let timer: NodeJS.Timeout
  // After a collection, the heap's committed size it is compacting down from (0: not compacting).
  let compactingFrom = 0

  const collect = (full: () => void): { before: number, after: number, totalAfter: number } => {
    const before = newSpaceBytes()
    const h0 = v8.getHeapStatistics()
    const t0 = performance.now()
    full()
    const pauseMs = performance.now() - t0
    const after = newSpaceBytes()
    const h1 = v8.getHeapStatistics()
    idleTrimStats.collections++
    idleTrimStats.pauseSeconds += pauseMs / 1000
    idleTrimStats.freedBytes += Math.max(0, h0.used_heap_size - h1.used_heap_size)
    opts.onTrim?.({
      pauseMs,
      newSpaceBeforeMb: before / MB,
      newSpaceAfterMb: after / MB,
      heapUsedBeforeMb: h0.used_heap_size / MB,
      heapUsedAfterMb: h1.used_heap_size / MB,
      heapTotalBeforeMb: h0.total_heap_size / MB,
      heapTotalAfterMb: h1.total_heap_size / MB,
    })
    idleSince = Date.now()
    return { before, after, totalAfter: h1.total_heap_size }
  }

  const check = (): void => {
    const now = performance.eventLoopUtilization()
    const busy = performance.eventLoopUtilization(now, last).utilization
    last = now
    if (busy >= maxUtilization) {
      wait = opts.idleMs
      idleSince = Date.now()
      compactingFrom = 0
    } else if (Date.now() - idleSince >= wait) {
      if (newSpaceBytes() > floor) {
        const c = collect(gc.trim)
        if (c.after < c.before) {
          floor = c.after
          wait = opts.idleMs
        } else {
          // Nothing given back (V8 judged the allocation rate too high): try again later, less often.
          wait = Math.min(wait * 2, MAX_BACKOFF_MS)
        }
        compactingFrom = c.totalAfter
      } else if (compactingFrom > 0) {
        // A full collection compacts only part of the old generation's emptied pages:
        // one more per idle window while the heap commits much more than it uses and
        // the last one made it smaller (pauses of one collection each, not of several).
        const h = v8.getHeapStatistics()
        if (h.total_heap_size - h.used_heap_size < SLACK_BYTES) compactingFrom = 0
        else {
          const c = collect(gc.compact)
          compactingFrom = c.totalAfter < compactingFrom ? c.totalAfter : 0
        }
      }
    }
    timer = setTimeout(check, opts.idleMs).unref()
  }
  timer = setTimeout(check, opts.idleMs).unref()
  return () => clearTimeout(timer)
}

export const IDLE_TRIM_ENV = Type.Object({
  IDLE_TRIM_SECONDS: Type.Integer({ minimum: 0, maximum: 3_600, default: 10, description: 'seconds of an idle event loop before one full collection; 0 turns it off' }),
})

/** `IDLE_TRIM_SECONDS` in milliseconds; a bad value throws ERR_CONFIG_INVALID like every other setting. */
export function idleTrimMs (env: Record<string, string | undefined>): number {
  return loadConfig(IDLE_TRIM_ENV, env).IDLE_TRIM_SECONDS * 1000
}
