// Card accounts for demos and load tests. `npm run seed:cards -- N` loads N
// accounts (tok_load_000001 ...) with a large balance; npm start seeds the demo set.
import type pg from 'pg'

export const DEMO_CARDS = Object.freeze([
  { token: 'tok_demo_visa_eur', currency: 'EUR', available: 500_000, status: 'active' },
  { token: 'tok_demo_mc_usd', currency: 'USD', available: 250_000, status: 'active' },
  { token: 'tok_demo_low_eur', currency: 'EUR', available: 1_000, status: 'active' },
  { token: 'tok_demo_frozen_usd', currency: 'USD', available: 100_000, status: 'inactive' },
])

export async function seedDemoCards (db: pg.Client | pg.Pool): Promise<typeof DEMO_CARDS> {
  for (const c of DEMO_CARDS) {
    await db.query('insert into card_auth.card_accounts (token, currency, available, status) values ($1, $2, $3, $4) on conflict (token) do nothing', [c.token, c.currency, c.available, c.status])
  }
  return DEMO_CARDS
}

/** The i-th request's card among n seeded load accounts (tok_load_000001…), round robin. */
export function loadCardToken (i: number, n = 1_000): string {
  return `tok_load_${String((i % n) + 1).padStart(6, '0')}`
}

export async function seedLoadCards (
  db: pg.Client | pg.Pool, n: number, opts: { currency?: string, available?: number } = {}
): Promise<number> {
  const { rowCount } = await db.query(
    `insert into card_auth.card_accounts (token, currency, available)
     select 'tok_load_' || lpad(i::text, 6, '0'), $2, $3 from generate_series(1, $1::int) i
     on conflict (token) do nothing`,
    [n, opts.currency ?? 'EUR', opts.available ?? 1_000_000_000])
  return rowCount ?? 0
}
