// The deck, read every 250 ms while the load runs (it polls each lane every
// 500 ms): lane states, active permits, the provider's breaker and every
// process's RSS. Afterwards the samples give the lanes' transitions, why a lane
// was seen down, tax's recovery and the breaker's figures.
import { LANE_NAMES, type LaneName } from '../../shared/lanes.ts'
import { sleep } from '../run-info.ts'
import type { DeckLane, DeckLanes, DrillClients } from './clients.ts'
import type { Clock, PhaseTimeline } from './timeline.ts'

export interface LaneReading {
  up: boolean
  error: string | null
  state: string | null
  active: number | null
  permits: number | null
  breaker: string | null
  probes: number | null
  /** Epoch ms the deck sent its poll, and when the lane's answer came back. */
  checkedAt: number
  answeredAt: number
}

export interface Sample { s: number, lanes: Record<string, LaneReading>, rssBytes: number, processes: number }

export interface Sampler {
  readonly samples: Sample[]
  /** Stops after the sample under way; resolves once it is in. */
  stop (): Promise<Sample[]>
}

export function startSampler (c: DrillClients, clock: Clock): Sampler {
  const samples: Sample[] = []
  let sampling = true
  const loop = (async () => {
    while (sampling) {
      const began = performance.now()
      try {
        samples.push(toSample(await c.lanes(), clock.at()))
      } catch { /* a missed sample shows as a gap */ }
      await sleep(Math.max(0, 250 - (performance.now() - began)))
    }
  })()
  return { samples, stop: async () => { sampling = false; await loop; return samples } }
}

function toSample (v: DeckLanes, s: number): Sample {
  const lanes: Sample['lanes'] = {}
  let rss = v.deck?.rssBytes ?? 0
  let processes = 1
  for (const l of v.lanes) {
    lanes[l.name] = toReading(l)
    if (l.rssBytes) { rss += l.rssBytes; processes++ }
  }
  for (const p of v.processes) if (p.rssBytes) { rss += p.rssBytes; processes++ }
  return { s, lanes, rssBytes: rss, processes }
}

function toReading (l: DeckLane): LaneReading {
  const breaker = l.status?.breakers?.[0]
  return {
    up: l.up,
    error: l.up ? null : (l.error ?? 'unknown'),
    state: l.status?.state ?? null,
    active: l.status?.active ?? null,
    permits: l.status?.permits ?? null,
    breaker: breaker?.state ?? null,
    probes: breaker?.probes ?? null,
    checkedAt: Date.parse(l.checkedAt),
    answeredAt: Date.parse(l.checkedAt) + (l.pollMs ?? 0),
  }
}

type TaxSample = LaneReading & { s: number }

function taxSamples (samples: Sample[]): TaxSample[] {
  return samples.flatMap(s => s.lanes.tax ? [{ s: s.s, ...s.lanes.tax }] : [])
}

export function saturatedSeen (samples: Sample[]): boolean {
  return taxSamples(samples).some(s => s.state === 'SATURATED')
}

/**
 * ms from the fault's end until tax had fewer than 5 active permits; null if never seen.
 * The first poll sent after the fault was cleared that found fewer than 5 permits in
 * use, timed at its answer: the lane's count was true at some moment of the poll, so
 * this never reads a recovery earlier than it was.
 */
export function taxRecoveryMs (samples: Sample[], clearedWall: number): number | null {
  const back = taxSamples(samples).find(s => s.checkedAt >= clearedWall && s.active !== null && s.active < 5)
  return back ? back.answeredAt - clearedWall : null
}

/** The deck's side of the provider's breaker during and after the fault. */
export interface DeckBreaker {
  opened: boolean
  /** ms from the heal until the first poll after it that found the breaker closed; null: never seen. */
  closedAfterHealMs: number | null
  /** The tax lane's own probes of the provider while the fault was on. */
  laneProbesInFault: number | null
}

export function deckBreaker (
  samples: Sample[], t: PhaseTimeline, fault: { setWall: number, clearedWall: number }
): DeckBreaker {
  const tax = taxSamples(samples)
  const closedAgain = tax.find(s => s.checkedAt >= fault.clearedWall && s.breaker === 'closed')
  // The lane's own probes in the fault (the rest of the provider's calls: the
  // lane's calls before it opened, and worker-tax's).
  const probesAt = (wall: number): number | null =>
    tax.filter(s => s.checkedAt <= wall && s.probes !== null).at(-1)?.probes ?? null
  const laneProbes = probesAt(fault.clearedWall)
  return {
    opened: tax.some(s => s.s >= t.faultFrom && s.breaker !== null && s.breaker !== 'closed'),
    closedAfterHealMs: closedAgain ? closedAgain.answeredAt - fault.clearedWall : null,
    laneProbesInFault: laneProbes !== null ? laneProbes - (probesAt(fault.setWall) ?? 0) : null,
  }
}

/** Deck samples in the fault's window (and the second after it) that found tax down. */
export function taxDownInFault (samples: Sample[], t: PhaseTimeline): number {
  return samples.filter(x => x.s >= t.faultFrom && x.s < t.faultTo + 1 && x.lanes.tax && !x.lanes.tax.up).length
}

/**
 * Why the deck saw a lane down, per lane: `timeout` (it did not answer its
 * status poll within the deck's deadline), `refused`, `http 503`, ...
 */
export function downReasons (samples: Sample[]): Record<string, Record<string, number>> {
  const reasons: Record<string, Record<string, number>> = {}
  for (const x of samples) {
    for (const [lane, v] of Object.entries(x.lanes)) {
      if (v.up) continue
      const r = (reasons[lane] ??= {})
      const why = v.error ?? 'unknown'
      r[why] = (r[why] ?? 0) + 1
    }
  }
  return reasons
}

export interface Transition { s: number, lane: string, from: string | null, to: string | null }

/** Every change of a lane's state between samples, lane by lane. */
export function transitions (samples: Sample[]): Transition[] {
  const out: Transition[] = []
  for (const lane of LANE_NAMES) {
    let prev: string | null | undefined
    for (const s of samples) {
      const st = s.lanes[lane]?.state
      if (st === undefined || st === prev) continue
      if (prev !== undefined) out.push({ s: s.s, lane, from: prev, to: st })
      prev = st
    }
  }
  return out
}

export const mb = (b: number | undefined): number => Math.round((b ?? 0) / 1e5) / 10

export interface RssFigures { processes: number, beforeMb: number, duringPeakMb: number, afterMb: number }

export function rssFigures (samples: Sample[], t: PhaseTimeline): RssFigures {
  const rssIn = (from: number, to: number): number[] =>
    samples.filter(s => s.s >= from && s.s < to).map(s => s.rssBytes)
  return {
    // The most processes one poll saw: a process that missed the last poll is still one.
    processes: Math.max(0, ...samples.map(s => s.processes)),
    beforeMb: mb(rssIn(t.baselineFrom, t.faultFrom).at(-1)),
    duringPeakMb: mb(Math.max(0, ...rssIn(t.faultFrom, t.faultTo))),
    afterMb: mb(rssIn(t.faultTo, t.end + 10).at(-1)),
  }
}

export interface LaneAt { state: string | null, active: number | null, up: boolean, error?: string | null }
export type LanePoint = { s: number, rssMb: number } & { [L in LaneName]?: LaneAt }

/** The samples as the report's lane timeline. */
export function laneTimeline (samples: Sample[]): LanePoint[] {
  return samples.map(s => ({
    s: Math.round(s.s * 100) / 100,
    rssMb: mb(s.rssBytes),
    ...Object.fromEntries(Object.entries(s.lanes).map(([k, v]) => [
      k,
      { state: v.state, active: v.active, up: v.up, ...(v.up ? {} : { error: v.error }) },
    ])) as { [L in LaneName]?: LaneAt },
  }))
}
