// Card authorizations by group commit (shared/db/group-commit.ts): the lane's
// admitted authorizations go to one connection of the role, and those that
// arrive while a commit is in flight are written together by the next one, one
// call of card_auth.authorize_batch (migration 0009) — one round trip, one WAL
// flush, one backend wake-up per batch instead of per authorization. Each is
// still decided by card_auth.authorize, durable before it is answered, exactly
// once per (client, Idempotency-Key). The batch never waits for a lock: an
// authorization whose card account is held elsewhere comes back `busy` and is
// written alone on the lane's pool (routes.ts), as every one was before.
import type pg from 'pg'
import { GroupCommit } from '../../shared/db/group-commit.ts'
import type { ExecutionDb } from '../../shared/lane-kit/execution.ts'
import type { AuthorizationRow } from './authorization.ts'

export interface AuthorizeInput {
  id: string
  clientId: string
  key: string
  fingerprint: string
  merchantId: string
  cardToken: string
  amount: number
  currency: string
  /** A warm-up's rehearsal (lane-kit/warm-up.ts): written by the same batch statement, then rolled back. */
  rehearsal?: boolean
}

export type AuthorizeOutput = AuthorizationRow & { fingerprint: string, replayed: boolean, in_progress: boolean }
/**
 * `busy`: another transaction holds the card's account; the batch did not wait
 * for it, the lane writes this one alone.
 */
export type BatchOutput = AuthorizeOutput & { busy: boolean }

// Named: parsed and planned once per connection, not once per authorization.
const AUTHORIZE = { name: 'card_auth.authorize', text: 'select * from card_auth.authorize($1, $2, $3, $4, $5, $6, $7, $8)' }
const AUTHORIZE_BATCH = { name: 'card_auth.authorize_batch', text: 'select * from card_auth.authorize_batch($1, $2, $3, $4, $5, $6, $7, $8)' }

// The parameters of both functions, in their order: one value each for authorize, one array each for the batch.
const PARAMS = ['id', 'clientId', 'key', 'fingerprint', 'merchantId', 'cardToken', 'amount', 'currency'] as const

/** One authorization alone, on a connection of the lane's pool (a busy one, or one of a batch that failed). */
export async function authorizeOne (db: ExecutionDb, x: AuthorizeInput): Promise<AuthorizeOutput> {
  const { rows } = await db.query<AuthorizeOutput>(AUTHORIZE, PARAMS.map(k => x[k]))
  return rows[0]!
}

export type AuthorizeWriter = GroupCommit<AuthorizeInput, BatchOutput>

export function authorizeWriter (
  databaseUrl: string, log: { warn (o: object, m: string): void }, delayMs = 0
): AuthorizeWriter {
  return new GroupCommit<AuthorizeInput, BatchOutput>({
    name: 'card-auth-writer',
    applicationName: 'watertight-card-auth',
    databaseUrl,
    log,
    delayMs,
    rehearsal: x => x.rehearsal === true,
    async write (c: pg.Client, xs: readonly AuthorizeInput[]) {
      const values = PARAMS.map(k => xs.map(x => x[k]))
      const { rows } = await c.query<BatchOutput & { ord: number }>({ ...AUTHORIZE_BATCH, values })
      const out = new Array<BatchOutput>(xs.length)
      for (const r of rows) out[r.ord - 1] = r
      return out
    },
  })
}
