// What every subject of `npm run bench -- queue --peers` is measured with, the
// same way: throughput from a release to the moment the database shows every
// job done (polled every 20 ms on a connection of its own), the most jobs ever
// active at once from per-job start/end timestamps, and percentiles.
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'

/**
 * Before each timed run, for every subject alike: dead rows of the runs before
 * it cleared (they would slow whichever run comes later), and a checkpoint, so
 * one set off by an earlier run's WAL does not land in the middle of a later
 * run. The pool must be a superuser's.
 */
export async function settle (db: pg.Pool, tables = ''): Promise<void> {
  await db.query(`vacuum analyze ${tables}`)
  await db.query('checkpoint')
}

export { sleep }

/**
 * Wait until `left(true)` is 0 (or the cap passes); returns the elapsed ms since
 * t0 (performance.now() clock) and what was left. `left(true)` need only tell
 * none (0) from some (a `limit 1` probe: a full count of a 20,000-job table
 * every 20 ms took about 3 ms of a core each time, out of the run it measures);
 * the count itself, `left(false)`, only once the cap has passed.
 */
export async function until (
  left: (probe: boolean) => Promise<number>, t0: number, capMs: number
): Promise<{ ms: number, left: number }> {
  for (;;) {
    const n = await left(true)
    const ms = performance.now() - t0
    if (n === 0) return { ms, left: 0 }
    if (ms >= capMs) return { ms, left: await left(false) }
    await sleep(20)
  }
}

/** `select count(*)` of the rows a query selects; with probe, of at most one of them. */
export async function countRows (db: pg.Pool, rowsSql: string, params: unknown[], probe: boolean): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`select count(*)::int as n from (${rowsSql}${probe ? ' limit 1' : ''}) s`, params)
  return rows[0]!.n
}

/** Highest number of intervals open at once (ends before starts at the same instant). Times in any one unit. */
export function maxOverlap (intervals: ReadonlyArray<readonly [number, number]>): number {
  const ev: Array<[number, number]> = []
  for (const [s, e] of intervals) { ev.push([s, 1], [e, -1]) }
  ev.sort((a, b) => a[0] - b[0] || a[1] - b[1])
  let cur = 0; let max = 0
  for (const [, d] of ev) { cur += d; if (cur > max) max = cur }
  return max
}

export function median (xs: readonly number[]): number {
  return percentile([...xs].sort((a, b) => a - b), 50)
}

export function percentile (sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p / 100 * sorted.length) - 1))]!
}

/** Microsecond epoch pairs from a query returning s and e as text (JS Dates would round to ms and hide overlaps). */
export async function intervalsUs (db: pg.Pool, sql: string, params: unknown[] = []): Promise<Array<[number, number]>> {
  const { rows } = await db.query<{ s: string, e: string }>(sql, params)
  return rows.map(r => [Number(r.s), Number(r.e)])
}

/** Paced single enqueues at `rate` per second (open loop: a slow call does not delay the schedule). */
export async function paced (n: number, rate: number, send: (i: number) => Promise<unknown>): Promise<void> {
  const t0 = performance.now()
  const inflight: Array<Promise<unknown>> = []
  for (let i = 0; i < n; i++) {
    const due = t0 + (i * 1000) / rate
    const wait = due - performance.now()
    if (wait > 1) await sleep(wait)
    inflight.push(send(i))
  }
  await Promise.all(inflight)
}

/** Run `fn` from `conns` concurrent loops until n calls are made; jobs/s. */
export async function concurrently (n: number, conns: number, fn: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0
  const t0 = performance.now()
  await Promise.all(Array.from({ length: conns }, async () => { while (next < n) await fn(next++) }))
  return n / ((performance.now() - t0) / 1000)
}

export interface Figures {
  enqueueSingle?: number
  enqueueBulk?: number
  unlimited?: number
  /** Unlimited at the same total concurrency as the limit (what the limit is compared with). */
  unlimitedEqual?: number
  limited?: number
  /** Each alternated run behind unlimitedEqual and limited (their medians). */
  equalRuns?: number[]
  limitedRuns?: number[]
  /** Jobs the limited run did not finish within its time cap. */
  limitedLeft?: number
  maxActive?: number
  p50Ms?: number
  p99Ms?: number
}
