// The registry of live worker processes (jobs.workers): the queues each serves
// and its local slots for each. jobs.fetch reads it to size each worker's share
// of a limited queue (jobs.shares). A row lives for its TTL unless refreshed
// (the worker does so with each heartbeat), so a crashed worker stops counting
// after one TTL; its share is handed back by the next worker that grows its own.
import type { Db } from './types.ts'

export async function workerSeen (
  db: Db, workerId: string, slots: Record<string, number>, ttlMs: number
): Promise<void> {
  const queues = Object.keys(slots).sort()
  await db.query('select jobs.worker_seen($1, $2::text[], $3::int[], $4)', [workerId, queues, queues.map(q => slots[q]!), Math.round(ttlMs)])
}

/** Leave the registry and hand back every share (drain). */
export async function workerGone (db: Db, workerId: string): Promise<void> {
  await db.query('select jobs.worker_gone($1)', [workerId])
}
