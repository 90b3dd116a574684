// Enqueue a job (through jobs.enqueue(), the one function lane roles may call).
// With an idempotency key, the same key on the same queue returns the first job.
import type { Db } from './types.ts'

export interface EnqueueOptions {
  priority?: number
  delayMs?: number
  maxAttempts?: number
  idempotencyKey?: string
}

export async function enqueue (db: Db, queue: string, type: string, payload: Record<string, unknown>, o: EnqueueOptions = {}): Promise<{ id: string, created: boolean }> {
  const { rows } = await db.query<{ id: string, created: boolean }>(
    'select * from jobs.enqueue($1, $2, $3, $4, $5, $6, $7)',
    [queue, type, payload, o.priority ?? 0, o.delayMs ?? 0, o.maxAttempts ?? 5, o.idempotencyKey ?? null])
  return rows[0]!
}
