// The fault's schedule: on at the baseline's end, off at the fault window's
// end, with the provider's call counters and the CPU marks read around it.
import { cpuBetween, cpuMark, type CpuMark, type CpuPhase } from '../cpu-phases.ts'
import { describeFault } from '../faults/spec.ts'
import type { FaultPeriod } from '../../services/tax-sandbox/app.ts'
import type { DrillClients } from './clients.ts'
import type { FleetUnderTest } from './fleet.ts'
import type { DrillOptions } from './options.ts'
import type { Clock, PhaseTimeline } from './timeline.ts'

type FaultOptions = Pick<DrillOptions, 'fault' | 'faultLatencyMs' | 'normalLatencyMs' | 'taxHeapMb'>
/** The sandbox's GET /faults/calls: quotes by caller under its faults now, and under the setting before. */
type FaultCalls = { current: FaultPeriod, previous: FaultPeriod | null }

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
  readonly #providerCalls: Array<FaultCalls | null> = []
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
  // sandbox), by caller (from each call's User-Agent: the lane's quotes,
  // worker-tax's reconciles, each one's probes), under each setting of its faults.
  // Read at the fault's end, after it was cleared: the setting before is the
  // fault, and its count is exactly the calls that arrived while it was on (none
  // made at normal latency while the deck set and cleared it).
  async #providerCallCount (): Promise<FaultCalls | null> {
    if (!this.#fleet.sandboxUrl) return null
    return await (await fetch(`${this.#fleet.sandboxUrl}/faults/calls`)).json() as FaultCalls
  }

  /** worker-tax's own probes of the provider (its breaker's, from its /status). */
  async #workerProbeCount (): Promise<number | null> {
    if (!this.#fleet.workerTaxUrl) return null
    const s = await (await fetch(`${this.#fleet.workerTaxUrl}/status`)).json() as { breakers?: Array<{ probes: number }> }
    return s.breakers?.[0]?.probes ?? null
  }

  /**
   * The provider's calls while the fault was on, by caller: the sandbox's own
   * latency fault, its count under that setting; a fault of the lane's code
   * leaves the sandbox's setting alone, so the count between the two reads.
   */
  get providerCallsByCallerInFault (): Record<string, number> | null {
    const [at, end] = this.#providerCalls
    if (!at || !end) return null
    if (this.#o.fault === 'slow-provider' && !this.#fleet.codeFault) {
      return end.previous?.faults.latencyMs === this.#o.faultLatencyMs ? end.previous.byCaller : null
    }
    const before = at.current.byCaller
    const delta = Object.entries(end.current.byCaller).map(([c, n]) => [c, n - (before[c] ?? 0)] as const)
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
