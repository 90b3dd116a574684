// Enqueue a job (through jobs.enqueue(), the one function lane roles may call).
// With an idempotency key, the same key on the same queue returns the first job.
import type { Db } from './types.ts'

export interface EnqueueOptions {
  priority?: number
  delayMs?: number
  maxAttempts?: number
  idempotencyKey?: string
}

export async function enqueue (
  db: Db, queue: string, type: string, payload: Record<string, unknown>, o: EnqueueOptions = {}
): Promise<{ id: string, created: boolean }> {
  const { rows } = await db.query<{ id: string, created: boolean }>(
    'select * from jobs.enqueue($1, $2, $3, $4, $5, $6, $7)',
    [queue, type, payload, o.priority ?? 0, o.delayMs ?? 0, o.maxAttempts ?? 5, o.idempotencyKey ?? null])
  return rows[0]!
}

export interface ManyJob { payload?: Record<string, unknown>, idempotencyKey?: string | null }

/**
 * Enqueue many jobs of one queue and type in one statement (jobs.enqueue_many,
 * which lane roles may also call from their own SQL). One commit and one
 * NOTIFY for the lot. Returns one { id, created } per job, in input order; a
 * taken idempotency key (in the table or earlier in the list) returns the
 * first job with created = false.
 */
export async function enqueueMany (db: Db, queue: string, type: string, jobs: readonly ManyJob[], o: Omit<EnqueueOptions, 'idempotencyKey'> = {}): Promise<Array<{ id: string, created: boolean }>> {
  if (jobs.length === 0) return []
  const keyed = jobs.some(j => j.idempotencyKey != null)
  const { rows } = await db.query<{ ord: number, id: string, created: boolean }>(
    'select * from jobs.enqueue_many($1, $2, $3::jsonb[], $4::text[], $5, $6, $7)',
    [queue, type, jobs.map(j => JSON.stringify(j.payload ?? {})),
      keyed ? jobs.map(j => j.idempotencyKey ?? null) : null,
      o.priority ?? 0, o.delayMs ?? 0, o.maxAttempts ?? 5])
  const out = new Array<{ id: string, created: boolean }>(jobs.length)
  for (const r of rows) out[r.ord - 1] = { id: r.id, created: r.created }
  return out
}
