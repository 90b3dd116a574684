// The drill's phases in seconds since the load started, and the clock that
// measures them: baseline, then the fault's window, then recovery.
import { sleep } from '../run-info.ts'
import type { DrillOptions } from './options.ts'

export type Phase = 'baseline' | 'fault' | 'recovery'

export interface PhaseTimeline {
  baselineFrom: number
  faultFrom: number
  faultTo: number
  end: number
  /** Whole seconds the load runs (the per-second timelines have one more slot). */
  seconds: number
  phaseOf (s: number): Phase
}

export function phaseTimeline (o: Pick<DrillOptions, 'baselineSeconds' | 'faultSeconds' | 'recoverySeconds'>): PhaseTimeline {
  const baselineFrom = 0
  const faultFrom = baselineFrom + o.baselineSeconds
  const faultTo = faultFrom + o.faultSeconds
  const end = faultTo + o.recoverySeconds
  const phaseOf = (s: number): Phase => s < faultFrom ? 'baseline' : s < faultTo ? 'fault' : 'recovery'
  return { baselineFrom, faultFrom, faultTo, end, seconds: Math.ceil(end), phaseOf }
}

/** One slot per second of the run; a late answer falls into the last. */
export function perSecond<T> (t: PhaseTimeline, mk: () => T): T[] {
  return Array.from({ length: t.seconds + 1 }, mk)
}

export function slotOf (t: PhaseTimeline, s: number): number {
  return Math.min(t.seconds, Math.floor(s))
}

export interface Clock {
  /** performance.now() and Date.now() when the load started. */
  t0: number
  wall0: number
  /** Seconds since the load started. */
  at (): number
  /** Seconds since the load started of a performance.now() time. */
  since (perfNow: number): number
  /** Resolves at `s` seconds after the load started. */
  until (s: number): Promise<void>
}

export function startClock (): Clock {
  const t0 = performance.now()
  const wall0 = Date.now()
  return {
    t0,
    wall0,
    at: () => (performance.now() - t0) / 1000,
    since: perfNow => (perfNow - t0) / 1000,
    until: s => sleep(s * 1000 - (performance.now() - t0)),
  }
}
