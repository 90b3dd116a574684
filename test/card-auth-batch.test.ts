// card_auth.authorize_batch (the lane's group commit) must decide exactly what its
// first form (migration 0009) decided: each element in card-token then arrival
// order, busy when another transaction holds its card account, in progress when
// another holds its key, a replay for a key written before or earlier in the
// batch, else approved or declined with the holds of those before it. Both run
// here on the same random batches from the same state, each in a transaction
// rolled back afterwards, with another transaction holding a card account's row
// lock and a key's advisory lock during every other batch; their answers, the rows
// they write and the balances they leave must be the same.
import crypto from 'node:crypto'
import type pg from 'pg'
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { functionAsOf } from './helpers/migrations.ts'

const db = await testDatabase(t)

// The first form, as migration 0009 made it (card_auth.authorize_batch_0009).
await db.query(functionAsOf('0009', 'card_auth.authorize_batch').sql)

const CARDS = ['tok_eq_rich', 'tok_eq_a', 'tok_eq_b', 'tok_eq_usd', 'tok_eq_off', 'tok_eq_none']
await db.query(`insert into card_auth.card_accounts (token, currency, available, status) values
  ('tok_eq_rich', 'EUR', 1000000, 'active'), ('tok_eq_a', 'EUR', 500, 'active'), ('tok_eq_b', 'EUR', 300, 'active'),
  ('tok_eq_usd', 'USD', 1000, 'active'), ('tok_eq_off', 'EUR', 100000, 'inactive')`)
// Keys written before any batch: replays.
for (const k of ['k-0', 'k-1', 'k-2']) {
  await db.query("select * from card_auth.authorize($1, 'c1', $2, 'fp-pre', 'm_pre', 'tok_eq_a', 50, 'EUR')", [crypto.randomUUID(), k])
}

// A small deterministic generator, so a failure can be replayed from its seed.
function rng (seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    x ^= x + Math.imul(x ^ (x >>> 7), 61 | x)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

interface Batch {
  ids: string[]
  clients: string[]
  keys: string[]
  fps: string[]
  merchants: string[]
  cards: string[]
  amounts: number[]
  currencies: string[]
}

function randomBatch (r: () => number): Batch {
  const n = 1 + Math.floor(r() * 25)
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!
  const b: Batch = { ids: [], clients: [], keys: [], fps: [], merchants: [], cards: [], amounts: [], currencies: [] }
  for (let i = 0; i < n; i++) {
    b.ids.push(crypto.randomUUID())
    b.clients.push(pick(['c1', 'c1', 'c2']))
    b.keys.push(`k-${Math.floor(r() * 30)}`)
    b.fps.push(`fp-${Math.floor(r() * 3)}`)
    b.merchants.push(pick(['m_1', 'm_2']))
    b.cards.push(pick(CARDS))
    b.amounts.push(1 + Math.floor(r() * 250))
    b.currencies.push(r() < 0.9 ? 'EUR' : 'USD')
  }
  return b
}

type Row = Record<string, unknown>

/**
 * One implementation on one batch, in a transaction rolled back: its answer,
 * the rows it wrote, the balances it left.
 */
async function run (
  c: pg.PoolClient, fn: string, b: Batch
): Promise<{ answer: Row[], written: Row[], balances: Row[] }> {
  await c.query('begin')
  try {
    const { rows: [tx] } = await c.query<{ now: Date }>('select now()')
    const { rows } = await c.query(`select * from card_auth.${fn}($1, $2, $3, $4, $5, $6, $7, $8)`,
      [b.ids, b.clients, b.keys, b.fps, b.merchants, b.cards, b.amounts, b.currencies])
    // created_at of a row written by this batch is its transaction's now(): the same in both, as a marker.
    const answer = rows.map(r => ({ ...r, created_at: r.created_at === null ? null : r.created_at.getTime() === tx!.now.getTime() ? 'this batch' : r.created_at.toISOString() }))
      .sort((x, y) => x.ord - y.ord)
    const written = (await c.query('select id, client_id, idempotency_key, fingerprint, merchant_id, card_token, amount, currency, status, decline_reason from card_auth.authorizations where created_at = now() order by id')).rows
    const balances = (await c.query("select token, available, held from card_auth.card_accounts where token like 'tok_eq_%' order by token")).rows
    return { answer, written, balances }
  } finally {
    await c.query('rollback')
  }
}

t.test('the batch decides what one call per element decided, on 300 random batches', async t => {
  const seed = Number(process.env.BATCH_SEED ?? Date.now() % 1_000_000)
  t.comment(`seed ${seed} (BATCH_SEED=${seed} replays it)`)
  const r = rng(seed)
  const c = await db.pool.connect()
  const holder = await db.pool.connect()
  const seen = {
    approved: 0,
    busy: 0,
    in_progress: 0,
    replayed: 0,
    twiceInBatch: 0,
    unknown_card: 0,
    card_inactive: 0,
    currency_mismatch: 0,
    insufficient_funds: 0,
  }
  try {
    for (let i = 0; i < 300; i++) {
      const held = i % 2 === 0
      if (held) {
        // Another transaction holds tok_eq_b's account and the key (c1, k-5).
        await holder.query('begin')
        await holder.query("select 1 from card_auth.card_accounts where token = 'tok_eq_b' for update")
        await holder.query("select pg_advisory_xact_lock(hashtextextended('c1' || chr(31) || 'k-5', 727002))")
      }
      const b = randomBatch(r)
      // Make sure every batch that can have one has a key twice.
      if (b.ids.length > 3) { b.clients[3] = b.clients[0]!; b.keys[3] = b.keys[0]! }
      const now = await run(c, 'authorize_batch', b)
      const before = await run(c, 'authorize_batch_0009', b)
      if (held) await holder.query('commit')
      t.same(now, before, `batch ${i} (${b.ids.length} elements)`, { diagnostic: false })
      if (JSON.stringify(now) !== JSON.stringify(before)) {
        const differs = now.answer.flatMap((a, j) =>
          JSON.stringify(a) === JSON.stringify(before.answer[j]) ? [] : [{ now: a, before: before.answer[j] }])
        t.comment(JSON.stringify({ seed, batch: i, differs, balances: { now: now.balances, before: before.balances } }))
        break
      }
      for (const a of now.answer) {
        if (a.busy) seen.busy++
        else if (a.in_progress) seen.in_progress++
        else if (a.replayed && a.created_at === 'this batch') seen.twiceInBatch++
        else if (a.replayed) seen.replayed++
        else if (a.status === 'approved') seen.approved++
        else seen[a.decline_reason as 'unknown_card']++
      }
    }
  } finally {
    await holder.query('rollback').catch(() => {})
    holder.release()
    c.release()
  }
  t.comment(JSON.stringify(seen))
  for (const [k, v] of Object.entries(seen)) t.ok(v > 0, `the batches had ${k} (${v})`)
})

t.test('an empty batch answers nothing and writes nothing', async t => {
  const c = await db.pool.connect()
  try {
    const empty: Batch = {
      ids: [], clients: [], keys: [], fps: [], merchants: [], cards: [], amounts: [], currencies: [],
    }
    const r = await run(c, 'authorize_batch', empty)
    t.same(r.answer, [])
    t.same(r.written, [])
  } finally { c.release() }
})
