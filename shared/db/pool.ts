// One pg.Pool per lane process, connecting as the lane's own role. Its max is
// this replica's share of the role's fleet-wide CONNECTION LIMIT (lanes.ts).
import pg from 'pg'
import type { LaneLimits } from '../lanes.ts'

export interface PoolCounts { total: number, idle: number, waiting: number, max: number }

export function createLanePool (limits: LaneLimits, databaseUrl: string, log: { error: (o: object, m: string) => void }): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: limits.db.poolMax,
    // A request never waits for a connection longer than its own deadline.
    connectionTimeoutMillis: limits.deadlineMs,
    // The role's connections are this lane's reserved budget: keep them open, so
    // a burst (or the overflow path, which has a 100 ms connect budget) never
    // waits for new connections to authenticate.
    idleTimeoutMillis: 0,
    application_name: `watertight-${limits.lane}`,
    statement_timeout: limits.db.statementTimeoutMs,
  })
  // An idle client's error (server restart, network) is surfaced, never swallowed;
  // without a listener it would crash the process.
  pool.on('error', err => log.error({ err }, 'idle pg client error'))
  return pool
}

/**
 * A pool for a process that is not a lane (worker, deck): one role, a max that
 * is that process's share of the role's limit. With createLanePool, the only
 * places the fleet makes pools (npm run lint:bulkheads holds everyone to it).
 */
export function createRolePool (databaseUrl: string, o: { max: number, applicationName: string }, log: { error: (o: object, m: string) => void } = { error: (obj, m) => console.error(JSON.stringify({ level: 'error', msg: m, err: String((obj as { err?: unknown }).err) })) }): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: o.max, application_name: o.applicationName })
  pool.on('error', err => log.error({ err }, 'idle pg client error'))
  return pool
}

/** One connection, for LISTEN and for command-line tools. */
export function createClient (databaseUrl: string, applicationName = 'watertight-tool'): pg.Client {
  return new pg.Client({ connectionString: databaseUrl, application_name: applicationName })
}

export function poolCounts (pool: pg.Pool): PoolCounts {
  return { total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount, max: (pool.options as { max: number }).max }
}

/** Fails start-up when the pool does not connect as the role the lane table names (ADV-FD-01 at runtime). */
export async function assertRole (pool: pg.Pool, role: string, budgetMs = START_BUDGET_MS): Promise<void> {
  const { rows } = await retrying(() => pool.query<{ current_user: string }>('select current_user'), budgetMs)
  const got = rows[0]?.current_user
  if (got !== role) throw new Error(`ERR_SHARED_FAILURE_DOMAIN_DETECTED: pool connects as ${String(got)}, expected ${role}`)
}

// How long start-up keeps trying to reach the database before it gives up.
const START_BUDGET_MS = 60_000
// Connections opened at once while warming. Each is a SCRAM login, a few ms of
// server CPU: 40 at once on a busy 2-core host took longer than a 500 ms connect
// timeout and killed the lane at start (CI, issue 14); 4 at a time never did.
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
  const worker = async (): Promise<void> => {
    while (claimed < n && Date.now() < until) {
      claimed++
      try {
        held.push(await retrying(() => pool.connect(), until - Date.now()))
      } catch { claimed--; return }
    }
  }
  await Promise.all(Array.from({ length: Math.min(WARM_CONCURRENCY, n) }, worker))
  const opened = held.length
  for (const c of held) c.release()
  return opened
}

/** fn, retried with capped exponential backoff and jitter until it succeeds or `budgetMs` has passed. */
export async function retrying<T> (fn: () => Promise<T>, budgetMs: number): Promise<T> {
  const until = Date.now() + budgetMs
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn()
    } catch (err) {
      const wait = Math.min(2_000, 50 * 2 ** attempt) * (0.5 + Math.random() / 2)
      if (Date.now() + wait >= until) throw err
      await new Promise(resolve => setTimeout(resolve, wait))
    }
  }
}

/**
 * A connection within `budgetMs`, or the error `onTimeout` makes. For paths that
 * run outside a permit (overflow, compensation): they may use a free connection
 * but must never queue behind a busy pool. A connection that arrives late is
 * released at once.
 */
export async function connectWithin (pool: pg.Pool, budgetMs: number, onTimeout: () => Error): Promise<pg.PoolClient> {
  let timer: NodeJS.Timeout | undefined
  const conn = pool.connect()
  try {
    return await Promise.race([conn, new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(onTimeout()), budgetMs) })])
  } catch (err) {
    conn.then(c => c.release(), () => {})
    throw err
  } finally {
    clearTimeout(timer)
  }
}
