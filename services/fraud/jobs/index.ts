// fraud-async: score a queued screening with the same engine as the lane, as the
// fraud role (fraud_ds). Idempotent: the row is locked and scored only while it
// is still queued, so a rescued zombie that runs again changes nothing.
import { FatalJobError, JOB_NAMES, type JobType } from '../../../shared/queue/job-types.ts'
import { withTransaction } from '../../../shared/db/transaction.ts'
import { cardHistory } from '../history.ts'
import { score, weightsFromEnv } from '../scoring.ts'

export function jobTypes (): JobType[] {
  const weights = weightsFromEnv()
  return [{
    type: JOB_NAMES.fraudScore,
    lane: 'fraud',
    idempotent: true,
    async run (payload, ctx) {
      return withTransaction(ctx.db!, async c => {
        const { rows } = await c.query<{
          id: string
          card_token: string
          amount: string
          status: string
          ip_country: string | null
          billing_country: string | null
        }>(
          'select id, card_token, amount, ip_country, billing_country, status from fraud.screenings where id = $1 for update', [payload.screeningId])
        const s = rows[0]
        if (!s) throw new FatalJobError(`screening ${String(payload.screeningId)} does not exist`)
        if (s.status === 'final') return { already: true }
        const h = await cardHistory(c, s.card_token, weights, s.id)
        const result = score({
          amount: Number(s.amount),
          ipCountry: s.ip_country ?? undefined,
          billingCountry: s.billing_country ?? undefined,
          ...h,
        }, weights)
        // `response` keeps the first answer (the 202) for idempotent replays; GET shows the result.
        await c.query(
        `update fraud.screenings set status = 'final', score = $2, decision = $3, reasons = $4, scored_at = now()
          where id = $1 and status = 'queued'`, [s.id, result.score, result.decision, JSON.stringify(result.reasons)])
        return { score: result.score, decision: result.decision }
      })
    },
  }]
}
