// The registry of live worker processes (jobs.workers): the queues each serves
// and its local slots for each. jobs.fetch reads it to share a limited queue
// fairly among the workers serving it. A row lives for its TTL unless
// refreshed (the worker does so with each heartbeat), so a crashed worker stops
// counting after one TTL.
import type { Db } from './types.ts'

export async function workerSeen (db: Db, workerId: string, slots: Record<string, number>, ttlMs: number): Promise<void> {
  const queues = Object.keys(slots).sort()
  await db.query('select jobs.worker_seen($1, $2::text[], $3::int[], $4)', [workerId, queues, queues.map(q => slots[q]!), Math.round(ttlMs)])
}

export async function workerGone (db: Db, workerId: string): Promise<void> {
  await db.query('delete from jobs.workers where id = $1', [workerId])
}
