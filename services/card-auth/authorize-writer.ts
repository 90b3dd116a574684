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
}

export type AuthorizeOutput = AuthorizationRow & { fingerprint: string, replayed: boolean, in_progress: boolean }
/** `busy`: another transaction holds the card's account; the batch did not wait for it, the lane writes this one alone. */
export type BatchOutput = AuthorizeOutput & { busy: boolean }

// Named: parsed and planned once per connection, not once per authorization.
const AUTHORIZE = { name: 'card_auth.authorize', text: 'select * from card_auth.authorize($1, $2, $3, $4, $5, $6, $7, $8)' }
const AUTHORIZE_BATCH = { name: 'card_auth.authorize_batch', text: 'select * from card_auth.authorize_batch($1, $2, $3, $4, $5, $6, $7, $8)' }

const params = (xs: readonly AuthorizeInput[]) => {
  const col = <K extends keyof AuthorizeInput>(k: K) => xs.map(x => x[k])
  return [col('id'), col('clientId'), col('key'), col('fingerprint'), col('merchantId'), col('cardToken'), col('amount'), col('currency')]
}

/** One authorization alone, on a connection of the lane's pool (a batch that failed is retried this way, one by one). */
export async function authorizeOne (db: { query: (q: { name: string, text: string }, v: unknown[]) => Promise<{ rows: AuthorizeOutput[] }> }, x: AuthorizeInput): Promise<AuthorizeOutput> {
  const { rows } = await db.query(AUTHORIZE, [x.id, x.clientId, x.key, x.fingerprint, x.merchantId, x.cardToken, x.amount, x.currency])
  return rows[0]!
}

export type AuthorizeWriter = GroupCommit<AuthorizeInput, BatchOutput>

export function authorizeWriter (databaseUrl: string, log: { warn (o: object, m: string): void }): AuthorizeWriter {
  return new GroupCommit<AuthorizeInput, BatchOutput>({
    name: 'card-auth-writer',
    applicationName: 'watertight-card-auth',
    databaseUrl,
    log,
    async write (c: pg.Client, xs: readonly AuthorizeInput[]) {
      const { rows } = await c.query<BatchOutput & { ord: number }>({ ...AUTHORIZE_BATCH, values: params(xs) })
      const out = new Array<BatchOutput>(xs.length)
      for (const r of rows) out[r.ord - 1] = r
      return out
    },
  })
}
