// What an admitted execution may touch: its abort signal and its lane's pool,
// through a handle that hands every checked-out connection back when the
// execution is aborted. A deadline or disconnect destroys the connection (the
// server cancels the query: roles set client_connection_check_interval), so the
// pool gets its slot back at once instead of after the query would have ended.
import type pg from 'pg'
import { PoolReplaced } from '../db/pool.ts'
import { inTransaction } from '../db/transaction.ts'
import type { Cancellation } from '../cancellation.ts'
import { inSpan, sampled, SpanKind, type Context } from '../tracing.ts'

export interface ExecutionDb {
  /** A named query (`{ name, text }`) is parsed once per connection and reused. */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string | { name: string, text: string }, values?: unknown[]
  ): Promise<pg.QueryResult<R>>
  /** Runs fn in one transaction on one connection; no I/O but this lane's SQL may happen inside. */
  tx<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T>
}

export interface Execution {
  /**
   * Aborted when the execution must stop (deadline, client gone) or has ended.
   * Made on first use: prefer `cancel` where a Cancellation will do.
   */
  readonly signal: AbortSignal
  /** The same stop as `signal`, without an AbortSignal (shared/cancellation.ts). */
  readonly cancel: Cancellation
  readonly db: ExecutionDb
}

/** Where an execution reports whether the database handed it a connection (lane-kit/recovery.ts). */
export interface DependencyReport { dependencyFailed (name: string): void, dependencyOk (name: string): void }

/**
 * `trace`: the execution's trace context; when its trace is sampled, each
 * statement (and each transaction) is a client span under it.
 */
export function executionDb (
  poolOf: pg.Pool | (() => pg.Pool), signal: Cancellation, report?: DependencyReport, trace?: Context
): ExecutionDb {
  const current = typeof poolOf === 'function' ? poolOf : () => poolOf
  const held = new Set<{ client: pg.PoolClient, released: boolean }>()

  const onAbort = (): void => {
    for (const h of held) {
      if (!h.released) { h.released = true; h.client.release(new Error('execution aborted')) }
    }
    held.clear()
  }
  // Listens from the first connection on: an execution that never touches its pool costs nothing here.
  let listening = false

  async function withClient<T> (fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    if (signal.aborted) throw signal.reason
    let client: pg.PoolClient
    let pool = current()
    try {
      try {
        client = await pool.connect()
      } catch (err) {
        // The lane replaced its pool while this execution waited for a connection
        // of the old one (a recovery lag, lane-kit/recovery.ts): it waits on the new one.
        if (!(err instanceof PoolReplaced)) throw err
        pool = current()
        client = await pool.connect()
      }
    } catch (err) {
      // No connection because every one of the pool's is taken is the lane's own
      // state, not PostgreSQL failing; a connection that could not be opened is.
      const exhausted = pool.totalCount >= (pool.options as { max: number }).max
      if (!signal.aborted && !exhausted) report?.dependencyFailed('database')
      throw err
    }
    report?.dependencyOk('database')
    const h = { client, released: false }
    if (signal.aborted) { h.released = true; client.release(); throw signal.reason }
    if (!listening) { listening = true; signal.onAbort(onAbort) }
    held.add(h)
    let broken = false
    try {
      return await fn(client)
    } catch (err) {
      broken = signal.aborted
      throw signal.aborted ? signal.reason : err
    } finally {
      held.delete(h)
      if (!h.released) { h.released = true; client.release(broken) }
    }
  }

  const db: ExecutionDb = {
    query: (text, values) => withClient(c => typeof text === 'string' ? c.query(text, values) : c.query({ ...text, values })),
    tx: fn => withClient(c => inTransaction(c, fn, { skipRollback: () => signal.aborted })),
  }
  return sampled(trace) ? tracedDb(db, trace!) : db
}

/**
 * Statement spans, OpenTelemetry's database conventions: named by the
 * prepared statement's name or the SQL's first word. The text goes as it is
 * (values are always parameters, never in it). No sqlcommenter comment: the
 * lanes' statements are prepared once per connection by name, and a comment
 * that changes per request would have them parsed again on every call.
 */
function tracedDb (db: ExecutionDb, trace: Context): ExecutionDb {
  const attributes = (text: string, operation: string) => ({
    'db.system.name': 'postgresql', 'db.operation.name': operation, 'db.query.text': text.trim(),
  })
  return {
    query: (text, values) => {
      const sql = typeof text === 'string' ? text : text.text
      const operation = /^\s*(\w+)/.exec(sql)?.[1]?.toUpperCase() ?? 'QUERY'
      const name = typeof text === 'string' ? operation : text.name
      return inSpan(`db ${name}`, { kind: SpanKind.CLIENT, attributes: attributes(sql, operation) }, trace, () => db.query(text, values))
    },
    tx: fn => inSpan('db transaction', {
      kind: SpanKind.CLIENT, attributes: { 'db.system.name': 'postgresql', 'db.operation.name': 'TRANSACTION' },
    }, trace, () => db.tx(fn)),
  }
}
