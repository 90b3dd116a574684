// Where a machine's CPU went during each phase of a run, in cores: every fleet
// process (by label; PostgreSQL backends by role, proc-cpu.ts), this process (the
// load generator), and the whole machine from /proc/stat, busy and stolen by the
// hypervisor. A drill that fails for capacity shows it here: the machine busy
// on every core, and what took it.
import fs from 'node:fs'
import type pg from 'pg'
import { cpuByPid, cpuUs, fleetProcesses } from './proc-cpu.ts'

const TICK_US = 10_000 // /proc/stat counts in USER_HZ (100 on Linux)

export interface CpuMark {
  /** performance.now() of the reading. */
  at: number
  procs: Map<number, string>
  cpu: Map<number, number>
  /** This process's CPU µs. */
  self: number
  /** Whole machine, µs summed over its CPUs. */
  machine: { busy: number, irq: number, steal: number, total: number, cpus: number }
}

export interface CpuPhase {
  seconds: number
  /** Cores each label used on average (a label's processes summed). */
  fleet: Record<string, number>
  fleetTotal: number
  generator: number
  /** The machine: cores busy (user, nice, system, irq, softirq), cores stolen, of `cpus`. */
  machineBusy: number
  /** Of machineBusy, in interrupt context (irq, softirq: loopback's receive side runs there). */
  irq: number
  steal: number
  cpus: number
}

function machineNow (): CpuMark['machine'] {
  const lines = fs.readFileSync('/proc/stat', 'utf8').split('\n')
  const f = lines[0]!.trim().split(/\s+/).slice(1).map(Number)
  const [user, nice, system, idle, iowait, irq, softirq, steal] =
    f as [number, number, number, number, number, number, number, number]
  return {
    busy: (user + nice + system + irq + softirq) * TICK_US,
    irq: (irq + softirq) * TICK_US,
    steal: steal * TICK_US,
    total: (user + nice + system + idle + iowait + irq + softirq + steal) * TICK_US,
    cpus: lines.filter(l => /^cpu\d+ /.test(l)).length,
  }
}

/** A reading of every process below `root` (none when the fleet is not this machine's) and of the machine. */
export async function cpuMark (root: number | undefined, db: pg.Client): Promise<CpuMark> {
  const procs = root === undefined ? new Map<number, string>() : await fleetProcesses(root, db)
  return { at: performance.now(), procs, cpu: cpuByPid(procs), self: cpuUs(process.pid) ?? 0, machine: machineNow() }
}

/**
 * Cores used between two readings. A process first seen at `b` (a backend or a
 * restarted lane that started in between) is counted whole: its CPU was all
 * spent since it started. One gone by `b` is left out (at most its last few ms).
 */
export function cpuBetween (a: CpuMark, b: CpuMark): CpuPhase {
  const us = (b.at - a.at) * 1000
  const fleet: Record<string, number> = {}
  for (const [pid, label] of b.procs) {
    const end = b.cpu.get(pid)
    if (end === undefined) continue
    const begin = a.procs.has(pid) ? a.cpu.get(pid) : 0
    if (begin === undefined) continue
    fleet[label] = (fleet[label] ?? 0) + (end - begin) / us
  }
  const total = b.machine.total - a.machine.total
  const cpus = b.machine.cpus
  const r2 = (x: number): number => Math.round(x * 100) / 100
  return {
    seconds: Math.round(us / 1e5) / 10,
    fleet: Object.fromEntries(Object.entries(fleet).map(([k, v]) => [k, r2(v)])),
    fleetTotal: r2(Object.values(fleet).reduce((x, y) => x + y, 0)),
    generator: r2((b.self - a.self) / us),
    machineBusy: total > 0 ? r2((b.machine.busy - a.machine.busy) / total * cpus) : 0,
    irq: total > 0 ? r2((b.machine.irq - a.machine.irq) / total * cpus) : 0,
    steal: total > 0 ? r2((b.machine.steal - a.machine.steal) / total * cpus) : 0,
    cpus,
  }
}

/** Rows for a table, phases as columns: the labels using ≥ 0.01 core in some phase, busiest in `sortBy` first. */
export function cpuRows (phases: Record<string, CpuPhase>, sortBy: string): Array<Array<string | number>> {
  const names = Object.keys(phases)
  const labels = new Set(names.flatMap(n =>
    Object.entries(phases[n]!.fleet).filter(([, v]) => v >= 0.01).map(([k]) => k)))
  const at = (n: string, k: string): number => phases[n]!.fleet[k] ?? 0
  const sorted = [...labels].sort((x, y) => at(sortBy, y) - at(sortBy, x))
  const f = (x: number): string => x.toFixed(2)
  return [
    ...sorted.map(k => [k, ...names.map(n => f(at(n, k)))]),
    // A fleet not started by this process has no processes here: the machine's rows say it all.
    ...(labels.size ? [['whole fleet', ...names.map(n => f(phases[n]!.fleetTotal))]] : []),
    ['load generator (this process)', ...names.map(n => f(phases[n]!.generator))],
    ['machine busy (/proc/stat)', ...names.map(n => `${f(phases[n]!.machineBusy)} of ${phases[n]!.cpus}`)],
    ['of which in interrupt context (irq, softirq)', ...names.map(n => f(phases[n]!.irq))],
    ['stolen by the hypervisor', ...names.map(n => f(phases[n]!.steal))],
  ]
}
