// The fraud scoring engine: deterministic, explainable, configurable.
import t from 'tap'
import { DEFAULT_WEIGHTS, score, weightsFromEnv } from '../services/fraud/scoring.ts'

const base = { amount: 1_000, recentCount: 0, historyCount: 10, historyAvgAmount: 1_000 }

t.test('a usual payment is approved with no reasons', async t => {
  t.same(score(base), { score: 0, decision: 'approve', reasons: [] })
})

t.test('each rule adds its points and says why', async t => {
  t.match(score({ ...base, ipCountry: 'DE', billingCountry: 'FR' }), { score: 20, decision: 'approve', reasons: [{ rule: 'country_mismatch', points: 20 }] })
  t.match(score({ ...base, amount: 3_500 }), { score: 25, reasons: [{ rule: 'amount_spike' }] })
  t.match(score({ ...base, amount: 12_000 }), { score: 45, decision: 'review', reasons: [{ rule: 'amount_extreme' }] })
  t.match(score({ ...base, recentCount: 5 }), { score: 30, reasons: [{ rule: 'velocity', detail: '6 screenings of this card in 10 min' }] })
  t.match(score({ ...base, recentCount: 20 }), { score: 40 }, 'velocity is capped')
  t.match(score({ amount: 60_000, recentCount: 0, historyCount: 0, historyAvgAmount: 0 }), { score: 15, reasons: [{ rule: 'new_card_high_amount' }] })
  t.same(score({ ...base, amount: 2_000, historyCount: 2 }).reasons, [], 'amount rules need enough history')
})

t.test('rules add up to review and decline, and the score is capped at 100', async t => {
  const r = score({ ...base, amount: 50_000, recentCount: 9, ipCountry: 'US', billingCountry: 'GB' })
  t.equal(r.score, 100)
  t.equal(r.decision, 'decline')
  t.same(r.reasons.map(x => x.rule), ['velocity', 'amount_extreme', 'country_mismatch'])
  t.same(score({ ...base, amount: 50_000, recentCount: 9, ipCountry: 'US', billingCountry: 'GB' }), r, 'deterministic')
})

t.test('weights and thresholds are configurable and validated', async t => {
  const w = weightsFromEnv({ FRAUD_SCORING_WEIGHTS: '{"countryMismatch": 80, "declineAt": 75}' })
  t.equal(score({ ...base, ipCountry: 'DE', billingCountry: 'FR' }, w).decision, 'decline')
  t.equal(weightsFromEnv({}), DEFAULT_WEIGHTS)
  t.throws(() => weightsFromEnv({ FRAUD_SCORING_WEIGHTS: '{"nope": 1}' }), /unknown key/)
  t.throws(() => weightsFromEnv({ FRAUD_SCORING_WEIGHTS: '{"reviewAt": -1}' }), /non-negative/)
  t.throws(() => weightsFromEnv({ FRAUD_SCORING_WEIGHTS: '{"reviewAt": 90, "declineAt": 80}' }), /reviewAt/)
})
