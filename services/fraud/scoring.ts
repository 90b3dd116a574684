// Deterministic, explainable fraud scoring: each rule adds points and a reason;
// the same inputs always give the same score. Used by the lane (sync) and by
// the worker's fraud-async job, so both modes decide alike.
import { Type } from 'typebox'
import { loadConfig } from '../../shared/config.ts'

export interface ScoringWeights {
  /** Screenings of the card in the velocity window above which each extra one scores. */
  velocityFree: number
  velocityPerExtra: number
  velocityMax: number
  /** Amount above this multiple of the card's average scores `amountSpike`. */
  amountSpikeRatio: number
  amountSpike: number
  /** Amount above this multiple scores `amountExtreme` instead. */
  amountExtremeRatio: number
  amountExtreme: number
  /** History needed before the amount rules apply. */
  minHistory: number
  countryMismatch: number
  newCardHighAmount: number
  newCardHighAmountValue: number
  reviewAt: number
  declineAt: number
  velocityWindowMinutes: number
}

export const DEFAULT_WEIGHTS: Readonly<ScoringWeights> = Object.freeze({
  velocityFree: 3,
  velocityPerExtra: 10,
  velocityMax: 40,
  amountSpikeRatio: 3,
  amountSpike: 25,
  amountExtremeRatio: 10,
  amountExtreme: 45,
  minHistory: 3,
  countryMismatch: 20,
  newCardHighAmount: 15,
  newCardHighAmountValue: 50_000,
  reviewAt: 40,
  declineAt: 70,
  velocityWindowMinutes: 10,
})

export interface ScoringInput {
  amount: number
  ipCountry?: string | undefined
  billingCountry?: string | undefined
  /** Screenings of this card in the velocity window, excluding this one. */
  recentCount: number
  /** Earlier screenings of this card and their average amount. */
  historyCount: number
  historyAvgAmount: number
}

export interface Reason { rule: string, points: number, detail: string }
export interface ScoreResult { score: number, decision: 'approve' | 'review' | 'decline', reasons: Reason[] }

export function score (input: ScoringInput, w: ScoringWeights = DEFAULT_WEIGHTS): ScoreResult {
  const reasons: Reason[] = []
  const extra = input.recentCount + 1 - w.velocityFree
  if (extra > 0) {
    reasons.push({ rule: 'velocity', points: Math.min(w.velocityMax, extra * w.velocityPerExtra), detail: `${input.recentCount + 1} screenings of this card in ${w.velocityWindowMinutes} min` })
  }
  if (input.historyCount >= w.minHistory && input.historyAvgAmount > 0) {
    const ratio = input.amount / input.historyAvgAmount
    if (ratio >= w.amountExtremeRatio) reasons.push({ rule: 'amount_extreme', points: w.amountExtreme, detail: `amount is ${ratio.toFixed(1)}x the card's average` })
    else if (ratio >= w.amountSpikeRatio) reasons.push({ rule: 'amount_spike', points: w.amountSpike, detail: `amount is ${ratio.toFixed(1)}x the card's average` })
  } else if (input.historyCount === 0 && input.amount >= w.newCardHighAmountValue) {
    reasons.push({ rule: 'new_card_high_amount', points: w.newCardHighAmount, detail: 'first screening of this card with a high amount' })
  }
  if (input.ipCountry && input.billingCountry && input.ipCountry !== input.billingCountry) {
    reasons.push({ rule: 'country_mismatch', points: w.countryMismatch, detail: `IP country ${input.ipCountry} differs from billing country ${input.billingCountry}` })
  }
  const total = Math.max(0, Math.min(100, reasons.reduce((s, r) => s + r.points, 0)))
  const decision = total >= w.declineAt ? 'decline' : total >= w.reviewAt ? 'review' : 'approve'
  return { score: total, decision, reasons }
}

/** Read by the fraud lane and worker-fraud; docs/operations.md lists it (test/config-docs.test.ts). */
export const FRAUD_ENV = Type.Object({
  FRAUD_SCORING_WEIGHTS: Type.Optional(Type.String({ description: 'JSON: any subset of the scoring weights' })),
})

/** Weights from FRAUD_SCORING_WEIGHTS (JSON, any subset of the keys), validated. */
export function weightsFromEnv (env: Record<string, string | undefined> = process.env): ScoringWeights {
  const raw = loadConfig(FRAUD_ENV, env).FRAUD_SCORING_WEIGHTS
  if (!raw) return DEFAULT_WEIGHTS
  let parsed: Record<string, unknown>
  try {
    parsed = JSON.parse(raw) as Record<string, unknown>
  } catch {
    throw new Error('FRAUD_SCORING_WEIGHTS: not JSON')
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('FRAUD_SCORING_WEIGHTS: must be a JSON object')
  for (const [k, v] of Object.entries(parsed)) {
    if (!(k in DEFAULT_WEIGHTS)) throw new Error(`FRAUD_SCORING_WEIGHTS: unknown key ${k}`)
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new Error(`FRAUD_SCORING_WEIGHTS: ${k} must be a non-negative number`)
  }
  const w = { ...DEFAULT_WEIGHTS, ...parsed } as ScoringWeights
  if (!(w.reviewAt <= w.declineAt)) throw new Error('FRAUD_SCORING_WEIGHTS: reviewAt must not exceed declineAt')
  return Object.freeze(w)
}
