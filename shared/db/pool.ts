// One pg.Pool per lane process, connecting as the lane's own role. Its max is
// this replica's share of the role's fleet-wide CONNECTION LIMIT (lanes.ts).
// Every pool of the fleet reports connections held too long (leak-detection.ts).
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { backoffMs } from '../backoff.ts'
import type { LaneLimits } from '../lanes.ts'
import { destroySocket } from './destroy-socket.ts'
import { detectLeaks, heldLongerThan, LEAK_DETECTION_DEFAULT_MS, untracked } from './leak-detection.ts'

export interface PoolCounts { total: number, idle: number, waiting: number, max: number }

export interface PoolLog { error (o: object, m: string): void, warn (o: object, m: string): void }

const consoleLog: PoolLog = {
  error: (obj, m) => console.error(JSON.stringify({ level: 'error', msg: m, err: String((obj as { err?: unknown }).err) })),
  warn: (obj, m) => console.error(JSON.stringify({ level: 'warn', msg: m, ...obj })),
}

export function createLanePool (
  limits: LaneLimits, databaseUrl: string, log: PoolLog, max = limits.db.poolMax
): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max,
    // A request never waits for a connection longer than its own deadline.
    connectionTimeoutMillis: limits.deadlineMs,
    // The role's connections are this lane's reserved budget: keep them open, so
    // a burst never waits for new connections to authenticate.
    idleTimeoutMillis: 0,
    application_name: `watertight-${limits.lane}`,
    statement_timeout: limits.db.statementTimeoutMs,
  })
  // An idle client's error (server restart, network) is surfaced, never swallowed;
  // without a listener it would crash the process.
  pool.on('error', err => log.error({ err }, 'idle pg client error'))
  detectLeaks(pool, { name: limits.lane, thresholdMs: limits.db.leakDetectionMs, log })
  return pool
}

/** A wait for a connection of a pool that was replaced meanwhile: take one of the new pool. */
export class PoolReplaced extends Error {
  constructor () { super('the pool was replaced while waiting for a connection'); this.name = 'PoolReplaced' }
}

// The reset connection's connect and query timeouts: a dead server must not stall a replacement.
const RESET_TIMEOUT_MS = 2_000

/** What a reset failed at: its own connection, ending the backends, ending one returned late, closing the old pool. */
export type ResetStep = 'connect' | 'terminate' | 'terminate_returned' | 'end'

/**
 * A lane's pool that can be replaced while the lane serves: a recovery that
 * lags (connections stuck on a dead or black-holed server) resets it
 * (lane-kit/recovery.ts). New checkouts go to the new pool at once; the old
 * pool closes its idle clients now and ends when its checked-out clients come
 * back (executions give them back by their deadline at the latest), so no
 * admitted request is dropped; only clients held past the deadline, which no
 * execution holds, are cut.
 */
export class ReplaceablePool {
  #current: pg.Pool
  #replacing = false
  readonly #make: () => pg.Pool
  readonly #failed: (step: ResetStep, err: unknown) => void

  /** `failed`: told of each step of a reset that failed; the reset goes on without it. */
  constructor (make: () => pg.Pool, failed: (step: ResetStep, err: unknown) => void = () => {}) {
    this.#make = make
    this.#failed = failed
    this.#current = make()
  }

  get current (): pg.Pool { return this.#current }

  /**
   * New checkouts go to a new pool. Clients of the old one held longer than
   * `staleAfterMs` (the execution deadline: no admitted execution holds one that
   * long) are stuck on the old connections: their sockets are closed, so whoever
   * holds them gets an error and gives them back. Their backends, and those of
   * the old pool's idle connections, are ended on the server too: closing a
   * socket does not end its backend when the network eats the close (a black
   * hole, a hung middlebox), and such backends would hold the role's CONNECTION
   * LIMIT until TCP gives up on them, so the new pool could not open any. That is
   * done on one connection of its own, opened before the swap on the connection
   * of each replica's share that no pool uses (RESET_CONNECTIONS, shared/lanes.ts),
   * so the new pool's connections cannot take its place. Resolves with the
   * number of backends ended.
   */
  async replace (staleAfterMs: number): Promise<number> {
    if (this.#replacing) return 0
    this.#replacing = true
    const old = this.#current
    const o = old.options as pg.PoolConfig
    const reset = new pg.Client({ connectionString: o.connectionString, application_name: `${o.application_name ?? 'watertight'}-reset`, connectionTimeoutMillis: RESET_TIMEOUT_MS, query_timeout: RESET_TIMEOUT_MS })
    reset.on('error', () => {})
    const connected = await reset.connect().then(() => true, (err: unknown) => { this.#failed('connect', err); return false })
    try {
      const stuck = heldLongerThan(old, staleAfterMs)
      const idle = ((old as unknown as { _idle?: Array<{ client: pg.PoolClient }> })._idle ?? []).map(i => i.client)
      const pids = [...idle, ...stuck].map(c => (c as unknown as { processID?: number }).processID).filter((p): p is number => typeof p === 'number')
      this.#current = this.#make()
      // Whoever waits for a connection of the old pool is told at once (PoolReplaced),
      // so an execution waiting there takes one of the new pool instead of waiting
      // out its deadline behind connections that may never come back. (pg-pool has
      // no public call for this; its queue of waiters is _pendingQueue.)
      const waiting = (old as unknown as { _pendingQueue?: Array<{ callback (err: Error): void }> })._pendingQueue
      for (const w of waiting?.splice(0) ?? []) w.callback(new PoolReplaced())
      // Their holders see their queries fail and give them back.
      for (const c of stuck) destroySocket(c)
      // Connections the old pool's executions still hold come back by their deadline
      // and are closed then: their backends are ended too, on the new pool.
      const ended = new Set(pids)
      old.on('remove', (c: pg.PoolClient) => {
        const pid = (c as unknown as { processID?: number }).processID
        if (typeof pid !== 'number' || ended.has(pid)) return
        ended.add(pid)
        this.#current.query('select pg_terminate_backend($1)', [pid]).catch((err: unknown) => { this.#failed('terminate_returned', err) })
      })
      old.end().catch((err: unknown) => { this.#failed('end', err) })
      if (!connected || pids.length === 0) return 0
      // A role may end its own backends (pg_terminate_backend).
      const r = await reset.query<{ ended: number }>('select count(*) filter (where pg_terminate_backend(pid))::int as ended from unnest($1::int[]) as pid', [pids]).catch((err: unknown) => { this.#failed('terminate', err); return undefined })
      return r?.rows[0]?.ended ?? 0
    } finally {
      this.#replacing = false
      await reset.end().catch(() => {})
    }
  }

  end (): Promise<void> { return this.#current.end() }
}

/**
 * A pool for a process that is not a lane (worker, deck): one role, a max that
 * is that process's share of the role's limit. With createLanePool, the only
 * places the fleet makes pools (npm run lint:bulkheads holds everyone to it).
 */
export function createRolePool (
  databaseUrl: string, o: { max: number, applicationName: string, leakDetectionMs?: number }, log: PoolLog = consoleLog
): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: o.max, application_name: o.applicationName })
  pool.on('error', err => log.error({ err }, 'idle pg client error'))
  detectLeaks(pool, { name: o.applicationName.replace(/^watertight-/, ''), thresholdMs: o.leakDetectionMs ?? LEAK_DETECTION_DEFAULT_MS, log })
  return pool
}

/** One connection, for LISTEN and for command-line tools. */
export function createClient (databaseUrl: string, applicationName = 'watertight-tool'): pg.Client {
  return new pg.Client({ connectionString: databaseUrl, application_name: applicationName })
}

interface PoolInternals {
  options: { max: number }
  _idle: Array<{ client: pg.PoolClient }>
  _clients: pg.PoolClient[]
  _expired: WeakSet<pg.PoolClient>
  _remove (c: pg.PoolClient): void
}

/**
 * Sets a pool's max while it serves (a lane replica's share, replica-share.ts).
 * Growing needs nothing: the pool opens up to the new max on demand. Shrinking
 * closes the connections over it, idle ones now and checked-out ones as they
 * come back: pg-pool closes a released client found in its expiry set (kept
 * for maxLifetimeSeconds, which no pool of the fleet sets). pg-pool has no
 * public call for either.
 */
export function resizePool (pool: pg.Pool, max: number): void {
  const p = pool as unknown as PoolInternals
  p.options.max = max
  if (p._clients.length <= max) { for (const c of p._clients) p._expired.delete(c); return }
  let over = p._clients.length - max - p._clients.filter(c => p._expired.has(c)).length
  while (over > 0 && p._idle.length > 0) { p._remove(p._idle[0]!.client); over-- }
  const idle = new Set(p._idle.map(i => i.client))
  for (const c of p._clients) {
    if (over <= 0) break
    if (!idle.has(c) && !p._expired.has(c)) { p._expired.add(c); over-- }
  }
}

export function poolCounts (pool: pg.Pool): PoolCounts {
  const { max } = pool.options as { max: number }
  return { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount, max }
}

/**
 * How start-up retries its first use of a role (shared/db/start-wait.ts:
 * retrying() for what is left of the start budget).
 */
export type StartRetry = <T>(fn: () => Promise<T>) => Promise<T>

/** Fails start-up when the pool does not connect as the role the lane table names (ADV-FD-01 at runtime). */
export async function assertRole (
  pool: pg.Pool, role: string, retry: StartRetry = fn => retrying(fn, START_BUDGET_MS)
): Promise<void> {
  const { rows } = await retry(() => pool.query<{ current_user: string }>('select current_user'))
  const got = rows[0]?.current_user
  if (got !== role) throw new Error(`ERR_SHARED_FAILURE_DOMAIN_DETECTED: pool connects as ${String(got)}, expected ${role}`)
}

/** How long start-up keeps trying to reach the database before it gives up (the worker's WORKER_START_BUDGET_MS). */
export const START_BUDGET_MS = 60_000
// Connections opened at once while warming. Each is a SCRAM login, a few ms of
// server CPU: dozens at once on a busy small host can outlast the connect
// timeout and kill the lane at start (issue 14); a few at a time do not.
const WARM_CONCURRENCY = 4

/**
 * Open up to `n` connections of the pool now (at boot), `WARM_CONCURRENCY` at a
 * time, retrying each failed connect with backoff, so the first burst finds
 * them ready. Warming is best effort: a connection it could not open in
 * `budgetMs` is opened on demand later. Returns how many were opened.
 */
export async function warmPool (pool: pg.Pool, n: number, budgetMs = START_BUDGET_MS): Promise<number> {
  const held: pg.PoolClient[] = []
  const until = Date.now() + budgetMs
  let claimed = 0 // connects started or done: never more than n, so none waits for a free client
  // A pool being ended (the lane drains: SIGTERM, or its supervisor is gone)
  // ends the warm-up: the held clients are released, so end() is not kept
  // waiting on connects that can only fail until the budget runs out.
  const ended = (): boolean => pool.ending
  // A role at its CONNECTION LIMIT (53300) ends the warm-up too: retrying while
  // holding what it opened would keep every connection of the pool checked out
  // (the lane's replica heartbeat among the waiters) for the whole budget.
  let full = false
  const stop = (): boolean => ended() || full
  const connect = (): Promise<pg.PoolClient> => pool.connect().catch((err: { code?: string }) => { if (err.code === '53300') full = true; throw err })
  // A pool whose max shrank meanwhile (a replica's share, replica-share.ts) is
  // warmed to its new max only: a connect past it would wait for a client the
  // warm-up itself holds.
  const max = (): number => Math.min(n, (pool.options as { max: number }).max)
  const worker = async (): Promise<void> => {
    while (claimed < max() && Date.now() < until && !stop()) {
      claimed++
      try {
        held.push(await retrying(connect, until - Date.now(), stop))
      } catch { claimed--; return }
    }
  }
  // Held on purpose until all are open (else the pool would hand the same few out again): not leaks.
  await untracked(pool, () => Promise.all(Array.from({ length: Math.min(WARM_CONCURRENCY, n) }, worker)))
  const opened = held.length
  for (const c of held) c.release()
  return opened
}

/**
 * fn, retried with capped exponential backoff and jitter until it succeeds,
 * `budgetMs` has passed, or `stop()` says there is no point.
 */
export async function retrying<T> (
  fn: () => Promise<T>, budgetMs: number, stop: () => boolean = () => false
): Promise<T> {
  const until = Date.now() + budgetMs
  for (let failures = 1; ; failures++) {
    try {
      return await fn()
    } catch (err) {
      const wait = backoffMs(failures, { baseMs: 50, capMs: 2_000, jitter: 'equal' })
      if (stop() || Date.now() + wait >= until) throw err
      await sleep(wait)
    }
  }
}
