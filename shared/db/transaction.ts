// The fleet's one way to run a transaction: BEGIN, the work, COMMIT; ROLLBACK
// when the work throws (unless the connection is being thrown away anyway),
// and the error goes on to the caller. The work returns `rollback(value)` to
// end the transaction without its writes and still answer.
import type pg from 'pg'

const ROLLBACK = Symbol('rollback')
export interface RolledBack<T> { readonly [ROLLBACK]: true, readonly value: T }
/** End the transaction without its writes, and answer `value`. */
export function rollback<T> (value: T): RolledBack<T> { return { [ROLLBACK]: true, value } }
const isRolledBack = (v: unknown): v is RolledBack<unknown> => typeof v === 'object' && v !== null && ROLLBACK in v

/**
 * Runs `fn` in one transaction on `client`. `skipRollback()`: the connection is
 * being discarded (e.g. an aborted execution), do not talk to it.
 */
export async function inTransaction<C extends pg.ClientBase, T> (
  client: C, fn: (c: C) => Promise<T | RolledBack<T>>, o: { skipRollback?: () => boolean } = {}
): Promise<T> {
  await client.query('begin')
  try {
    const out = await fn(client)
    if (isRolledBack(out)) { await client.query('rollback'); return out.value as T }
    await client.query('commit')
    return out
  } catch (err) {
    if (!o.skipRollback?.()) await client.query('rollback').catch(() => {})
    throw err
  }
}

/** A connection of `pool` for one transaction, given back afterwards. */
export async function withTransaction<T> (
  pool: pg.Pool, fn: (c: pg.PoolClient) => Promise<T | RolledBack<T>>
): Promise<T> {
  const c = await pool.connect()
  try {
    return await inTransaction(c, fn)
  } finally {
    c.release()
  }
}
