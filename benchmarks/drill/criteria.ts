// MC-RT-01's pass/fail criteria, as a pure function of the drill's figures, so
// the verdict can be tested apart from a 3-minute load run.

export interface Latency { count: number, p50Ms: number, p99Ms: number, maxMs: number }

/**
 * Shed tax requests: how many, how many answered in under the limit as the
 * client saw them (scheduled send to answer), percentiles of that, and beside
 * it the lane's own decision time (Server-Timing admit), its whole answer
 * (Server-Timing answer: arrival in the lane to the committed compensation) and,
 * where the gateway timed it (Server-Timing gateway), the answer in the gateway.
 */
export interface Decided {
  count: number
  under5: number
  p50Ms: number
  p99Ms: number
  maxMs: number
  lane: { p50Ms: number, p99Ms: number, maxMs: number }
  laneAnswer: { p50Ms: number, p99Ms: number, maxMs: number }
  gateway?: { p50Ms: number, p99Ms: number, maxMs: number }
}

export interface DrillFigures {
  card: { fault: Latency, errors: number }
  tax: { shed: number, decided: Decided, errors: number, saturatedSeen: boolean }
  /** Attempts of one key that reached a lane, in the busiest 10 s window of any key. */
  storm: { errors: number, maxReachedPerKey: number, allowedPerKey: number }
  /** ms from the fault's end until tax had fewer than 5 active permits; null = never seen. */
  taxRecoveryMs: number | null
  ledger: { acknowledged: number, lost: number, doubled: number, phantom: number }
  connections: Array<{ role: string, orphaned: number, total: number, limit: number }>
}

export interface Thresholds {
  /** card-auth p99 during the fault (ms): the SLA. */
  cardP99Ms: number
  /** An admission decision for a shed request (ms). */
  decideMs: number
  /** Tax active permits back under 5 after the fault ends (ms). */
  recoveryMs: number
}

export const SPEC_THRESHOLDS: Readonly<Thresholds> = Object.freeze({ cardP99Ms: 120, decideMs: 5, recoveryMs: 5_000 })

export interface Criterion { id: string, what: string, limit: string, measured: string, pass: boolean }

export function evaluate (f: DrillFigures, th: Thresholds = SPEC_THRESHOLDS): Criterion[] {
  const out: Criterion[] = []
  const add = (id: string, what: string, limit: string, measured: string, pass: boolean): void => {
    out.push({ id, what, limit, measured, pass })
  }
  const ms = (x: number): string => `${x.toFixed(x < 10 ? 2 : 0)} ms`

  add('fault-took-effect', 'the fault took effect: tax went SATURATED and shed requests', 'SATURATED seen, > 0 shed',
    `${f.tax.saturatedSeen ? 'SATURATED seen' : 'never SATURATED'}, ${f.tax.shed} shed`, f.tax.saturatedSeen && f.tax.shed > 0)
  add('card-p99', 'card-auth p99 during the fault', `<= ${th.cardP99Ms} ms`,
    `p50 ${ms(f.card.fault.p50Ms)}, p99 ${ms(f.card.fault.p99Ms)}, max ${ms(f.card.fault.maxMs)} (${f.card.fault.count} requests)`,
    f.card.fault.count > 0 && f.card.fault.p99Ms <= th.cardP99Ms)
  add('no-errors', 'answers other than success or a designed rejection (429, tax shed)', '0',
    `card ${f.card.errors}, tax ${f.tax.errors}, retrying client ${f.storm.errors}`, f.card.errors + f.tax.errors + f.storm.errors === 0)
  const d = f.tax.decided
  add('shed-decision', 'each shed tax request answered, as the client sees it (the lane\'s own decision and answer times, and the gateway\'s, beside it)', `< ${th.decideMs} ms, every one`,
    `p50 ${ms(d.p50Ms)}, p99 ${ms(d.p99Ms)}, max ${ms(d.maxMs)}; ${d.count - d.under5} of ${d.count} at or over ${th.decideMs} ms` +
    ` (in the lane: decided p50 ${ms(d.lane.p50Ms)}, p99 ${ms(d.lane.p99Ms)}, max ${ms(d.lane.maxMs)};` +
    ` answered p50 ${ms(d.laneAnswer.p50Ms)}, p99 ${ms(d.laneAnswer.p99Ms)}, max ${ms(d.laneAnswer.maxMs)}` +
    (d.gateway ? `; in the gateway p50 ${ms(d.gateway.p50Ms)}, p99 ${ms(d.gateway.p99Ms)}, max ${ms(d.gateway.maxMs)})` : ')'),
    d.count > 0 && d.under5 === d.count)
  add('tax-recovery', 'tax active permits < 5 after the fault ends', `< ${th.recoveryMs} ms`,
    f.taxRecoveryMs === null ? 'never seen' : ms(f.taxRecoveryMs), f.taxRecoveryMs !== null && f.taxRecoveryMs < th.recoveryMs)
  add('retry-storm', 'INC-4491 client: attempts of one key that reached a lane within any 10 s', `<= ${f.storm.allowedPerKey} per key per 10 s`,
    `max ${f.storm.maxReachedPerKey} per key per 10 s`, f.storm.maxReachedPerKey <= f.storm.allowedPerKey)
  add('ledger', 'authorizations lost, doubled, or written though refused (database)', '0',
    `${f.ledger.lost} lost, ${f.ledger.doubled} doubled, ${f.ledger.phantom} phantom of ${f.ledger.acknowledged} acknowledged`,
    f.ledger.acknowledged > 0 && f.ledger.lost + f.ledger.doubled + f.ledger.phantom === 0)
  const orphaned = f.connections.filter(c => c.orphaned > 0 || c.total > c.limit)
  add('orphaned-connections', 'orphaned DB connections per role after the drill', '0 per role',
    f.connections.map(c => `${c.role} ${c.orphaned}`).join(', '), f.connections.length > 0 && orphaned.length === 0)
  return out
}
