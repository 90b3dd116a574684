// The faults a benchmark or drill can put into the tax lane, and the control
// file that switches the preload's (preload.ts) on and off. Types and names
// only: the preload imports nothing but types from here.

/** slow-provider is the tax sandbox's latency (outside the lane); the rest are the lane's own code (the preload). */
export const FAULTS = ['slow-provider', 'cpu', 'loop-block', 'memory', 'crash'] as const
export type FaultName = typeof FAULTS[number]
export type CodeFault = Exclude<FaultName, 'slow-provider'>

export interface FaultControl {
  fault: CodeFault | 'none'
  /** Epoch ms the fault was switched on: `crash` kills a process started before it, once. */
  since: number
  /** cpu: CPU time spun per tax request. */
  cpuMs: number
  /** loop-block: one synchronous stall of this much CPU time… */
  blockMs: number
  /** …every this often. */
  blockEveryMs: number
  /** memory: MB kept on the JS heap per tax request. */
  retainMb: number
}

export const FAULT_FILE_ENV = 'WATERTIGHT_FAULT_FILE'

export const FAULT_DEFAULTS: Readonly<Omit<FaultControl, 'fault' | 'since'>> =
  Object.freeze({ cpuMs: 20, blockMs: 500, blockEveryMs: 3_000, retainMb: 4 })

/** What each fault does, for help texts and report headers. */
export function describeFault (f: FaultName, p: Omit<FaultControl, 'fault' | 'since'> = FAULT_DEFAULTS, heapMb?: number): string {
  switch (f) {
    case 'slow-provider': return 'the tax provider (sandbox) answers slowly'
    case 'cpu': return `each tax request spins ${p.cpuMs} ms of CPU in the tax lane's handler`
    case 'loop-block': return `the tax code's event loop stalls ${p.blockMs} ms every ${p.blockEveryMs / 1000} s`
    case 'memory': return `each tax request keeps ${p.retainMb} MB on the heap until the process hits its heap limit${heapMb ? ` (${heapMb} MB)` : ''}`
    case 'crash': return 'the process running tax code is killed (SIGKILL) once'
  }
}

export function parseFaults (list: string): FaultName[] | undefined {
  const out = list.split(',').map(s => s.trim()).filter(Boolean)
  return out.length > 0 && out.every(f => (FAULTS as readonly string[]).includes(f)) ? out as FaultName[] : undefined
}
