// card_auth.authorizations as a bench should find it: at least `rows` rows and
// its statistics taken, as a running fleet's autovacuum keeps them. Analyzed
// empty, the planner takes the unique key's lookup for a scan of a one-page table,
// and each backend keeps that plan while the table grows under the bench
// (autovacuum re-analyzes at most once a minute): bench:cost on a fresh data
// directory read 566 µs of card_auth_ds per authorization with 57% answered,
// against 220 µs and 100% in the next run on the same directory; bench:authorize
// saw its replay lookup's cost grow run by run. Filler rows go on the 1,000 load
// cards under their own client id.
import type pg from 'pg'

export async function fillAuthorizations (db: pg.Client, rows: number): Promise<void> {
  const have = Number((await db.query<{ n: string }>('select count(*) as n from card_auth.authorizations')).rows[0]!.n)
  if (have < rows) {
    await db.query(`insert into card_auth.authorizations (id, client_id, idempotency_key, fingerprint, merchant_id, card_token, amount, currency, status, decline_reason)
                    select uuidv7(), 'filler', 'filler-' || g, 'fp', 'm_filler', 'tok_load_' || lpad((1 + g % 1000)::text, 6, '0'), 1, 'EUR', 'approved', null
                      from generate_series($1::int + 1, $2::int) g
                    on conflict do nothing`, [have, rows])
  }
  await db.query('analyze card_auth.card_accounts, card_auth.authorizations')
}
