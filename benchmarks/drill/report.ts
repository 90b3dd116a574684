// drill.json: the report of one drill, built here in one place from what the
// phases recorded, with the verdict of its criteria (criteria.ts).
import type * as hdr from 'hdr-histogram-js'
import type { FaultName } from '../faults/spec.ts'
import { summary } from '../open-loop.ts'
import { gitCommit, machine } from '../run-info.ts'
import type { Ledger, RoleConnections } from './after-checks.ts'
import { evaluate, SPEC_THRESHOLDS, type Criterion, type Decided, type DrillFigures } from './criteria.ts'
import { faultText, type CpuByPhase, type FaultSchedule } from './fault.ts'
import type { LoadRun, LoopDelay, Recorded } from './load.ts'
import type { DrillOptions } from './options.ts'
import {
  deckBreaker, downReasons, laneTimeline, rssFigures, saturatedSeen, taxDownInFault, taxRecoveryMs, transitions,
  type LanePoint, type RssFigures, type Transition,
} from './sampler.ts'
import type { CardStream, StormSecond, TaxStream } from './streams.ts'

/** A histogram's summary: count and percentiles in ms. */
export type Percentiles = ReturnType<typeof summary>

export interface StreamLoad {
  rate: number, sentRate: number, maxSendLagMs: number, sendLag: { p50Ms: number, p99Ms: number }, scheduled: number
}

interface Spread { p50: number, p99: number, max: number }

/** Shed tax answers as the client saw them (ms), the lane's decision and answer, and the gateway's, beside them. */
export interface ShedAnswerMs extends Spread {
  count: number
  over5: number
  laneDecision: Spread
  laneAnswer: Spread
  gateway: (Spread & { count: number }) | null
}

/** The provider's breaker (issue 43's figures). */
export interface BreakerFigures {
  opened: boolean
  /** Tax answers during the fault. */
  taxInFault: Percentiles
  providerCallsInFault: number | null
  /** The same by caller, as the sandbox counted them: `tax`, `tax probe`, `worker-tax`, `worker-tax probe`. */
  providerCallsByCaller: Record<string, number> | null
  closedAfterHealMs: number | null
  laneProbesInFault: number | null
  workerProbesInFault: number | null
}

export interface RetryingClientFigures {
  clients: number
  sent: number
  blocked: number
  codes: Record<string, number>
  reachedPerKey: number[]
  errors: number
  allowedPerKey: number
}

export interface CardPoint {
  count: number
  ok: number
  r429: number
  errors: number
  p50Ms: number | null
  p99Ms: number | null
  maxMs: number | null
}
export interface TaxPoint { count: number, shed: number, compensated: number, errors: number, p99Ms: number | null }

export interface DrillReport {
  drill: 'MC-RT-01'
  runId: string
  command: string
  date: string
  commit: string
  machine: string
  placement: string
  load: {
    tool: string
    card: StreamLoad
    tax: StreamLoad
    retryingClient: { clients: number, intervalMs: number }
    generatorEventLoopDelay: LoopDelay
  }
  fault: { name: FaultName, what: string, latencyMs: number, normalLatencyMs: number, seconds: number }
  /** Seconds since the load started: [from, to) of each phase; when the fault was set and cleared. */
  phases: {
    warmupSeconds: number
    settledMs: number
    baseline: [number, number]
    fault: [number, number]
    recovery: [number, number]
    faultSetAtS: number
    faultClearedAtS: number
  }
  pass: boolean
  criteria: Criterion[]
  card: { baseline: Percentiles, fault: Percentiles, recovery: Percentiles, answers: Record<string, number> }
  tax: {
    answers: Record<string, number>
    shed: number
    shedAnswerMs: ShedAnswerMs
    recoveryMs: number | null
    stateTransitions: Transition[]
    breaker: BreakerFigures
  }
  otherLaneTransitions: Transition[]
  deckSawDown: { samples: number, reasons: Record<string, Record<string, number>> }
  retryingClient: RetryingClientFigures
  ledger: Ledger
  connections: RoleConnections[]
  rss: RssFigures
  /** Cores used per phase; null when a mark is missing. */
  cpu: CpuByPhase | null
  /** One point per second for the streams, one per deck sample for the lanes. */
  timeline: { second: number[], card: CardPoint[], tax: TaxPoint[], storm: StormSecond[], lanes: LanePoint[] }
}

/** What the report is built from: the options and each phase's outcome. */
export interface ReportInputs {
  o: DrillOptions
  runId: string
  placement: string
  settledMs: number
  recorded: Recorded
  fault: FaultSchedule
  ledger: Ledger
  connections: RoleConnections[]
}

/** ADV-IR-01: at most this many attempts of one key reach a lane in any 10 s. */
const ALLOWED_PER_KEY = 4

const TOOL = 'benchmarks/open-loop.ts: open loop on undici, one scheduler per stream, latency from the scheduled send time into HDR histograms (hdr-histogram-js)'

export function buildReport (x: ReportInputs): DrillReport {
  const { o, recorded: r } = x
  const { timeline: t, samples, clock } = r
  const breaker = breakerFigures(x)
  const all = transitions(samples)
  const storms = retryingClient(o, r)
  const figures = drillFigures(x, storms)
  const criteria = judged(o, evaluate(figures, { ...SPEC_THRESHOLDS, cardP99Ms: o.cardP99Ms }), {
    degraded: r.tax.degradedInFault(),
    down: taxDownInFault(samples, t),
    cardErrors: r.card.errors,
    taxErrors: r.tax.errors,
    stormErrors: r.storm.errors,
  })
  return {
    drill: 'MC-RT-01',
    runId: x.runId,
    command: o.command,
    date: new Date(clock.wall0).toISOString(),
    commit: gitCommit(),
    machine: machine(),
    placement: x.placement,
    load: {
      tool: TOOL,
      card: streamLoad(o.cardRate, r.load.card),
      tax: streamLoad(o.taxRate, r.load.tax),
      retryingClient: { clients: o.stormClients, intervalMs: o.stormIntervalMs },
      generatorEventLoopDelay: r.load.generatorDelay,
    },
    fault: {
      name: o.fault,
      what: faultText(o),
      latencyMs: o.faultLatencyMs,
      normalLatencyMs: o.normalLatencyMs,
      seconds: o.faultSeconds,
    },
    phases: {
      warmupSeconds: o.warmupSeconds,
      settledMs: x.settledMs,
      baseline: [t.baselineFrom, t.faultFrom],
      fault: [t.faultFrom, t.faultTo],
      recovery: [t.faultTo, t.end],
      faultSetAtS: x.fault.marks.setAt,
      faultClearedAtS: x.fault.marks.clearedAt,
    },
    pass: criteria.every(c => c.pass),
    criteria,
    card: cardSection(r.card),
    tax: {
      answers: r.tax.codes,
      shed: r.tax.shed,
      shedAnswerMs: shedAnswerMs(r.tax),
      recoveryMs: figures.taxRecoveryMs,
      stateTransitions: all.filter(s => s.lane === 'tax'),
      breaker,
    },
    otherLaneTransitions: all.filter(s => s.lane !== 'tax'),
    deckSawDown: { samples: samples.length, reasons: downReasons(samples) },
    retryingClient: storms,
    ledger: figures.ledger,
    connections: x.connections,
    rss: rssFigures(samples, t),
    cpu: x.fault.cpuByPhase(),
    timeline: timeline(r),
  }
}

/** The figures the criteria judge (criteria.ts). */
function drillFigures (x: ReportInputs, storms: RetryingClientFigures): DrillFigures {
  const { card, tax, samples } = x.recorded
  return {
    card: { fault: summary(card.byPhase.fault), errors: card.errors },
    tax: { shed: tax.shed, decided: decided(tax), errors: tax.errors, saturatedSeen: saturatedSeen(samples) },
    storm: {
      errors: storms.errors,
      maxReachedPerKey: Math.max(0, ...storms.reachedPerKey),
      allowedPerKey: storms.allowedPerKey,
    },
    taxRecoveryMs: taxRecoveryMs(samples, x.fault.marks.clearedWall),
    ledger: x.ledger,
    connections: x.connections,
  }
}

const ms3 = (p: Percentiles) => ({ p50Ms: p.p50Ms, p99Ms: p.p99Ms, maxMs: p.maxMs })
const spread = (p: Percentiles): Spread => ({ p50: p.p50Ms, p99: p.p99Ms, max: p.maxMs })

function decided (tax: TaxStream): Decided {
  const d = summary(tax.shedClient)
  const dg = summary(tax.shedGateway)
  return {
    count: tax.shed,
    under5: tax.shedUnder,
    ...ms3(d),
    lane: ms3(summary(tax.shedLane)),
    laneAnswer: ms3(summary(tax.shedAnswer)),
    ...(dg.count ? { gateway: ms3(dg) } : {}),
  }
}

function shedAnswerMs (tax: TaxStream): ShedAnswerMs {
  const dg = summary(tax.shedGateway)
  return {
    count: tax.shed,
    over5: tax.shed - tax.shedUnder,
    ...spread(summary(tax.shedClient)),
    laneDecision: spread(summary(tax.shedLane)),
    laneAnswer: spread(summary(tax.shedAnswer)),
    gateway: dg.count ? { count: dg.count, ...spread(dg) } : null,
  }
}

// The provider's breaker (issue 43's figures): tax answers during the fault,
// the provider's calls in it, and the first poll after the heal that found it closed.
function breakerFigures (x: ReportInputs): BreakerFigures {
  const { samples, timeline, clock, tax } = x.recorded
  const deck = deckBreaker(samples, timeline, {
    setWall: x.fault.setWall(clock),
    clearedWall: x.fault.marks.clearedWall,
  })
  return {
    opened: deck.opened,
    taxInFault: summary(tax.faultHistogram()),
    providerCallsInFault: x.fault.providerCallsInFault,
    providerCallsByCaller: x.fault.providerCallsByCallerInFault,
    closedAfterHealMs: deck.closedAfterHealMs,
    laneProbesInFault: deck.laneProbesInFault,
    workerProbesInFault: x.fault.workerProbesInFault,
  }
}

function retryingClient (o: DrillOptions, r: Recorded): RetryingClientFigures {
  const sec = r.storm.perSecond
  return {
    clients: o.stormClients,
    sent: sec.reduce((x, s) => x + s.sent, 0),
    blocked: sec.reduce((x, s) => x + s.blocked, 0),
    codes: r.storm.codes,
    reachedPerKey: r.storm.reachedPerKey,
    errors: r.storm.errors,
    allowedPerKey: ALLOWED_PER_KEY,
  }
}

function streamLoad (rate: number, run: LoadRun['card']): StreamLoad {
  return {
    rate,
    sentRate: run.sentRate,
    maxSendLagMs: run.maxSendLagMs,
    sendLag: run.sendLag,
    scheduled: run.scheduled,
  }
}

function cardSection (card: CardStream): DrillReport['card'] {
  const h = card.byPhase
  return {
    baseline: summary(h.baseline),
    fault: summary(h.fault),
    recovery: summary(h.recovery),
    answers: { 201: card.acknowledged.size, ...card.codes },
  }
}

const pct = (h: hdr.Histogram, p: number): number | null => h.totalCount ? h.getValueAtPercentile(p) / 1000 : null

function timeline (r: Recorded): DrillReport['timeline'] {
  return {
    second: r.card.perSecond.map((_x, i) => i),
    card: r.card.perSecond.map(s => ({
      count: s.h.totalCount,
      ok: s.ok,
      r429: s.r429,
      errors: s.err,
      p50Ms: pct(s.h, 50),
      p99Ms: pct(s.h, 99),
      maxMs: s.h.totalCount ? s.h.maxValue / 1000 : null,
    })),
    tax: r.tax.perSecond.map(s => ({
      count: s.h.totalCount,
      shed: s.shed,
      compensated: s.compensated,
      errors: s.err,
      p99Ms: pct(s.h, 99),
    })),
    storm: r.storm.perSecond,
    lanes: laneTimeline(r.samples),
  }
}

/**
 * For a fault in the tax lane's own code, the criteria about how tax sheds a slow
 * provider do not apply; whether the fault took effect, and card-auth's own
 * answers, are judged instead.
 */
function judged (
  o: DrillOptions,
  all: Criterion[],
  f: { degraded: number, down: number, cardErrors: number, taxErrors: number, stormErrors: number }
): Criterion[] {
  if (o.fault === 'slow-provider') return all
  return [
    { id: 'fault-took-effect', what: `the fault took effect (${faultText(o)})`, limit: 'tax answers degraded, or tax seen down by the deck', measured: `${f.degraded} tax answers not from the provider, tax down in ${f.down} deck samples`, pass: f.degraded + f.down > 0 },
    ...all.filter(c => c.id === 'card-p99'),
    { id: 'no-card-errors', what: 'card-auth answers other than 201 or a designed 429', limit: '0', measured: `${f.cardErrors} (the faulty tax lane's ${f.taxErrors} and the retrying client's ${f.stormErrors}: reported, not judged)`, pass: f.cardErrors === 0 },
    ...all.filter(c => ['retry-storm', 'ledger', 'orphaned-connections'].includes(c.id)),
  ]
}
