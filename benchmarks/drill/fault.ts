// The fault's schedule: on at the baseline's end, off at the fault window's
// end, with the provider's call counters and the CPU marks read around it.
import { cpuBetween, cpuMark, type CpuMark, type CpuPhase } from '../cpu-phases.ts'
import { describeFault } from '../faults/spec.ts'
import type { DrillClients } from './clients.ts'
import type { FleetUnderTest } from './fleet.ts'
import type { DrillOptions } from './options.ts'
import type { Clock, PhaseTimeline } from './timeline.ts'

type FaultOptions = Pick<DrillOptions, 'fault' | 'faultLatencyMs' | 'normalLatencyMs' | 'taxHeapMb'>

/** The fault in words, for the console and the report. */
export function faultText (o: FaultOptions): string {
  return o.fault === 'slow-provider' ? `tax sandbox at ${o.faultLatencyMs} ms` : describeFault(o.fault, undefined, o.taxHeapMb)
}

/** When the fault went on and off, in seconds since the load started (NaN until it did). */
export interface FaultMarks { setAt: number, clearedAt: number, clearedWall: number }

export type CpuByPhase = { baseline: CpuPhase, fault: CpuPhase, recovery: CpuPhase }

export class FaultSchedule {
  readonly marks: FaultMarks = { setAt: NaN, clearedAt: NaN, clearedWall: NaN }
  /** The counters read at the fault's start and end. */
  readonly #providerCalls: Array<Map<string, number> | null> = []
  readonly #workerProbes: Array<number | null> = []
  // CPU of every process and of the machine at the load's start, the fault's
  // start and end, and the load's end: what each phase used, in cores.
  readonly #cpuMarks: CpuMark[] = []
  readonly #fleet: FleetUnderTest
  readonly #clients: DrillClients
  readonly #o: FaultOptions

  constructor (fleet: FleetUnderTest, clients: DrillClients, o: FaultOptions) {
    this.#fleet = fleet
    this.#clients = clients
    this.#o = o
  }

  /** The sandbox at its normal latency, whatever a run before left. */
  async reset (): Promise<void> {
    await this.#clients.setTaxLatency(this.#o.normalLatencyMs)
  }

  async #set (on: boolean): Promise<void> {
    const { codeFault } = this.#fleet
    if (!codeFault) return this.#clients.setTaxLatency(on ? this.#o.faultLatencyMs : this.#o.normalLatencyMs)
    codeFault.set(on && this.#o.fault !== 'slow-provider' ? this.#o.fault : 'none')
  }

  /** Reads the CPU of the fleet's processes and the machine now. */
  async markCpu (): Promise<void> {
    this.#cpuMarks.push(await cpuMark(this.#fleet.pid, this.#clients.db))
  }

  /** On at the fault's start, off at its end, counters and CPU read at both. */
  async run (clock: Clock, t: PhaseTimeline): Promise<void> {
    await clock.until(t.faultFrom)
    await this.#readCounters()
    await this.#set(true)
    this.marks.setAt = clock.at()
    await this.markCpu()
    console.log(`  fault on at ${this.marks.setAt.toFixed(1)} s`)
    await clock.until(t.faultTo)
    await this.#set(false)
    this.marks.clearedAt = clock.at()
    this.marks.clearedWall = Date.now()
    await this.#readCounters()
    await this.markCpu()
    console.log(`  fault off at ${this.marks.clearedAt.toFixed(1)} s`)
  }

  async #readCounters (): Promise<void> {
    this.#providerCalls.push(await this.#providerCallCount())
    this.#workerProbes.push(await this.#workerProbeCount())
  }

  // The provider's own count of the quotes it was asked (a fleet started here: its
  // sandbox). Under its latency fault only those it labelled `slow`: the calls that
  // arrived while the fault was on, not the ones made at normal latency while the
  // deck set and cleared it. By caller: the sandbox reads it from the User-Agent
  // (the lane's quotes, worker-tax's reconciles, and each one's probes).
  async #providerCallCount (): Promise<Map<string, number> | null> {
    if (!this.#fleet.sandboxUrl) return null
    const callMode = this.#o.fault === 'slow-provider' ? 'mode="slow"' : ''
    const text = await (await fetch(`${this.#fleet.sandboxUrl}/metrics`)).text()
    const byCaller = new Map<string, number>()
    for (const m of text.matchAll(/^sandbox_quotes_total\{([^}]*)\} (\S+)$/gm)) {
      if (!m[1]!.includes(callMode)) continue
      const caller = /caller="([^"]*)"/.exec(m[1]!)?.[1] ?? 'other'
      byCaller.set(caller, (byCaller.get(caller) ?? 0) + Number(m[2]))
    }
    return byCaller
  }

  /** worker-tax's own probes of the provider (its breaker's, from its /status). */
  async #workerProbeCount (): Promise<number | null> {
    if (!this.#fleet.workerTaxUrl) return null
    const s = await (await fetch(`${this.#fleet.workerTaxUrl}/status`)).json() as { breakers?: Array<{ probes: number }> }
    return s.breakers?.[0]?.probes ?? null
  }

  /** The provider's calls while the fault was on, by caller. */
  get providerCallsByCallerInFault (): Record<string, number> | null {
    const [at, end] = this.#providerCalls
    if (!at || !end) return null
    const delta = [...end].map(([caller, n]) => [caller, n - (at.get(caller) ?? 0)] as const)
    return Object.fromEntries(delta.filter(([, n]) => n !== 0))
  }

  get providerCallsInFault (): number | null {
    const by = this.providerCallsByCallerInFault
    return by && Object.values(by).reduce((n, x) => n + x, 0)
  }

  get workerProbesInFault (): number | null { return inFault(this.#workerProbes) }

  /** Epoch ms the fault went on. */
  setWall (clock: Clock): number { return clock.wall0 + this.marks.setAt * 1000 }

  /** Cores used per phase (a fault that failed to switch leaves fewer marks: no table). */
  cpuByPhase (): CpuByPhase | null {
    const [m0, m1, m2, m3] = this.#cpuMarks
    return m0 && m1 && m2 && m3
      ? { baseline: cpuBetween(m0, m1), fault: cpuBetween(m1, m2), recovery: cpuBetween(m2, m3) }
      : null
  }
}

/** What a counter read at the fault's start and end moved by (null if either was not read). */
function inFault (at: Array<number | null>): number | null {
  return typeof at[0] === 'number' && typeof at[1] === 'number' ? at[1] - at[0] : null
}
