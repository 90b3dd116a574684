// The card's own history, read from the fraud schema: screenings in the velocity
// window, and the count and average amount of earlier ones. The same query feeds
// sync scoring in the lane and async scoring in the worker.
import type pg from 'pg'
import type { ScoringWeights } from './scoring.ts'

export async function cardHistory (
  db: pg.PoolClient | pg.Pool, cardToken: string, w: ScoringWeights, excludeId: string | null
): Promise<{ recentCount: number, historyCount: number, historyAvgAmount: number }> {
  const { rows } = await db.query<{ recent: string, n: string, avg: string | null }>(
    `select count(*) filter (where created_at > now() - make_interval(mins => $2)) as recent, count(*) as n, avg(amount) as avg
       from fraud.screenings where card_token = $1 and ($3::uuid is null or id <> $3::uuid)`, [cardToken, w.velocityWindowMinutes, excludeId])
  const h = rows[0]!
  return { recentCount: Number(h.recent), historyCount: Number(h.n), historyAvgAmount: Number(h.avg ?? 0) }
}
