// Vacuum the claim table, from the workers. Every claim moves a job out of
// jobs_hot_claim's view (pending -> processing) and every completion deletes
// its row, but the index keeps an entry for each until a vacuum removes it,
// and a claim reads the index from its front, where those entries are: each
// claim walks past every job claimed since the last vacuum. Autovacuum comes at
// most once per autovacuum_naptime (a minute by default), so at a few thousand
// jobs a second the walk grows to hundreds of thousands of entries, and a
// claim's cost grows with the backlog drained since the last vacuum. A vacuum
// every few thousand jobs is short and keeps that cost flat
// (docs/queue-benchmarks.md, "A deep backlog").
// SKIP_LOCKED: a vacuum already running (another worker's, or autovacuum's) is
// enough; this one returns at once. It needs the MAINTAIN privilege on the
// table (PostgreSQL 17+; shared/db/roles.ts grants it); without it the server
// skips the table with a warning and autovacuum alone does the work.
import type { Db } from './types.ts'

export async function vacuumClaimTable (db: Db): Promise<void> {
  await db.query('vacuum (skip_locked) jobs.jobs_hot')
}

/** Whether this connection's role may vacuum jobs_hot (false before PostgreSQL 17, which has no MAINTAIN). */
export async function mayVacuum (db: Db): Promise<boolean> {
  try {
    const { rows } = await db.query<{ ok: boolean }>("select has_table_privilege('jobs.jobs_hot', 'MAINTAIN') as ok")
    return rows[0]?.ok === true
  } catch { return false }
}
