// What an admitted execution may touch: its abort signal and its lane's pool,
// through a handle that hands every checked-out connection back when the
// execution is aborted. A deadline or disconnect destroys the connection (the
// server cancels the query: roles set client_connection_check_interval), so the
// pool gets its slot back at once instead of after the query would have ended.
import type pg from 'pg'

export interface ExecutionDb {
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>
  /** Runs fn in one transaction on one connection; no I/O but this lane's SQL may happen inside. */
  tx<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T>
}

export interface Execution {
  readonly signal: AbortSignal
  readonly db: ExecutionDb
}

export function executionDb (pool: pg.Pool, signal: AbortSignal): ExecutionDb {
  const held = new Set<{ client: pg.PoolClient, released: boolean }>()

  const onAbort = (): void => {
    for (const h of held) {
      if (!h.released) { h.released = true; h.client.release(new Error('execution aborted')) }
    }
    held.clear()
  }
  signal.addEventListener('abort', onAbort, { once: true })

  async function withClient<T> (fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    if (signal.aborted) throw signal.reason
    const client = await pool.connect()
    const h = { client, released: false }
    if (signal.aborted) { h.released = true; client.release(); throw signal.reason }
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

  return {
    query: (text, values) => withClient(c => c.query(text, values)),
    tx: fn => withClient(async c => {
      await c.query('begin')
      try {
        const out = await fn(c)
        await c.query('commit')
        return out
      } catch (err) {
        if (!signal.aborted) await c.query('rollback').catch(() => {})
        throw err
      }
    }),
  }
}
