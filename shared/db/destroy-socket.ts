// Cutting a pg client off now, query in flight or not: end() would wait for the
// query, and a hung server never answers it. With its socket destroyed, the
// query fails at once and a pool drops the client when it comes back. pg has no
// public call for this (test/pg-destroyed-socket.test.ts pins what it relies on).
import type pg from 'pg'

/** Destroys `c`'s socket; its 'error' is swallowed, since whoever holds it learns from the failed query. */
export function destroySocket (c: pg.ClientBase): void {
  c.on('error', () => {})
  ;(c as unknown as { connection?: { stream?: { destroy (): void } } }).connection?.stream?.destroy()
}
