// Connection leak detection (DEC-BH-01: HikariCP's leakDetectionThreshold, 2,000
// ms, on every pool). A client checked out of a pool for longer than the
// threshold is reported once, with the stack of the code that took it, and
// counted (the pool emits 'leak'; each process's metrics count it). Reporting
// does not reclaim anything: executions are cut at their deadline, which gives
// their connections back; this says where a connection was held too long.
// Cost per checkout: one Error object (V8 records its frames; the text is only
// formatted for a report) and a Map entry.
import type pg from 'pg'

export const LEAK_DETECTION_DEFAULT_MS = 2_000

export interface LeakReport { pool: string, heldMs: number, thresholdMs: number, stack: string }

interface Held { at: number, where: Error, reported: boolean }
const tracked = new WeakMap<pg.Pool, Map<pg.PoolClient, Held>>()
const warming = new WeakSet<pg.Pool>()

/** Run fn (opening a pool's connections at boot, holding them until all are open) without reporting those holds. */
export async function untracked<T> (pool: pg.Pool, fn: () => Promise<T>): Promise<T> {
  warming.add(pool)
  try { return await fn() } finally { warming.delete(pool) }
}

/** Clients of `pool` checked out for longer than `ms` right now (only for a pool with leak detection on). */
export function heldLongerThan (pool: pg.Pool, ms: number): pg.PoolClient[] {
  const now = performance.now()
  const held = tracked.get(pool) ?? new Map<pg.PoolClient, Held>()
  return [...held.entries()].filter(([, h]) => now - h.at > ms).map(([c]) => c)
}

type ConnectCallback = (err: Error | undefined, client?: pg.PoolClient, done?: (release?: unknown) => void) => void

export function detectLeaks (
  pool: pg.Pool, o: { name: string, thresholdMs: number, log: { warn (obj: object, m: string): void } }
): void {
  if (o.thresholdMs <= 0) return
  const held = new Map<pg.PoolClient, Held>()
  tracked.set(pool, held)
  const track = (client: pg.PoolClient, where: Error): void => {
    if (!warming.has(pool)) held.set(client, { at: performance.now(), where, reported: false })
  }
  const connect = pool.connect.bind(pool) as (cb?: ConnectCallback) => Promise<pg.PoolClient> | undefined
  // pool.query() checks out through this.connect too, so both paths are tracked.
  ;(pool as unknown as { connect: unknown }).connect = (cb?: ConnectCallback) => {
    const where = new Error('pool client checked out here')
    if (cb) return connect((err, client, done) => { if (client) track(client, where); cb(err, client, done) })
    return connect()!.then(client => { track(client, where); return client })
  }
  pool.on('release', (_err: Error | undefined, client: pg.PoolClient) => { held.delete(client) })
  pool.on('remove', (client: pg.Client) => { held.delete(client as pg.PoolClient) })
  const timer = setInterval(() => {
    const now = performance.now()
    for (const h of held.values()) {
      const heldMs = now - h.at
      if (h.reported || heldMs < o.thresholdMs) continue
      h.reported = true
      const report: LeakReport = { pool: o.name, heldMs: Math.round(heldMs), thresholdMs: o.thresholdMs, stack: h.where.stack ?? '' }
      o.log.warn(report, `connection leak: a ${o.name} pool client has been checked out for over ${o.thresholdMs} ms (DEC-BH-01)`)
      pool.emit('leak', report)
    }
  }, Math.max(50, Math.min(1_000, o.thresholdMs / 4)))
  timer.unref()
  const end = pool.end.bind(pool)
  ;(pool as unknown as { end: () => Promise<void> }).end = () => { clearInterval(timer); return end() }
}
