// The three systems under test of `npm run bench -- compare`, each with the tax
// fault preload (benchmarks/faults/) and heap limit on the process that runs tax
// code: the whole monolith in A and B, the tax lane alone in C. Nothing else
// differs from how each would run.
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import { waitHealthy } from '../../services/supervisor/child.ts'
import { descendants, hasTaskset, startLocalFleet } from '../local-fleet.ts'
import { sleep } from '../run-info.ts'

export type Topology = 'A' | 'B' | 'C'

export interface System {
  gatewayUrl: string
  /** card-auth's own URL now (a restarted monolith listens on new ports). */
  cardAuthUrl (): string
  /** The system's Node processes (for RSS). */
  pids (): number[]
  /** The process running tax code, if it is up. */
  taxPid (): number | undefined
  /** Times (performance.now()) the bench restarted a monolith that died; C's restarts are the supervisor's. */
  restarts: number[]
  stop (): Promise<void>
}

export interface Common {
  root: string, dataDir: string, basePort: number, cpus: string, taxNodeArgs: string[], faultEnv: Record<string, string>
}

const cmdline = (pid: number): string => {
  try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ') } catch { return '' }
}

/** RSS (bytes) of a process, from /proc; 0 when it is gone. */
export function rssOf (pid: number): number {
  try { return Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024 } catch { return 0 }
}

const pinned = (c: Common, argv: string[]): [string, string[]] =>
  hasTaskset() ? ['taskset', ['-c', c.cpus, process.execPath, ...argv]] : [process.execPath, argv]

function stopChild (child: ChildProcess): Promise<void> {
  return new Promise(resolve => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    const kill = setTimeout(() => child.kill('SIGKILL'), 15_000)
    child.once('exit', () => { clearTimeout(kill); resolve() })
    child.kill('SIGTERM')
  })
}

export async function startSandbox (c: Common): Promise<{ url: string, stop (): Promise<void> }> {
  const port = c.basePort + 50
  const [cmd, args] = pinned(c, ['--import', 'tsx', 'services/tax-sandbox/main.ts'])
  const child = spawn(cmd, args, {
    cwd: c.root,
    env: { ...process.env, TAX_SANDBOX_PORT: String(port), LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const url = `http://127.0.0.1:${port}`
  await waitHealthy(`${url}/health/live`, 20_000)
  return { url, stop: () => stopChild(child) }
}

/**
 * A or B, under a restart loop: nothing restarts a monolith unless something
 * runs it under one (systemd's Restart=always, a container's restart policy).
 * The bench is that loop here, with the supervisor's first backoff (250 ms).
 */
export async function startMonolith (c: Common, topology: 'A' | 'B', env: Record<string, string>): Promise<System> {
  let child!: ChildProcess
  let laneUrls: Record<string, string> = {}
  let stopping = false
  const restarts: number[] = []
  const launch = (): Promise<{ gatewayUrl: string }> => {
    // The heap limit and the preload go to node itself, before tsx.
    const [cmd, argv] = pinned(c, [...c.taxNodeArgs, '--import', 'tsx', 'benchmarks/compare/monolith.ts'])
    child = spawn(cmd, argv, {
      cwd: c.root,
      stdio: ['ignore', 'pipe', 'inherit'],
      env: {
        ...process.env,
        ...env,
        ...c.faultEnv,
        TOPOLOGY: topology,
        GATEWAY_PORT: String(c.basePort + 40),
        LOG_LEVEL: 'error',
      },
    })
    const me = child
    me.once('exit', () => {
      if (stopping) return
      restarts.push(performance.now())
      void sleep(250).then(() => { if (!stopping) launch().catch(err => console.error(`  monolith restart failed: ${(err as Error).message}`)) })
    })
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('monolith did not start')), 60_000)
      readline.createInterface({ input: me.stdout! }).on('line', l => {
        try {
          const j = JSON.parse(l)
          if (j.up) { clearTimeout(timer); laneUrls = j.laneUrls; resolve(j) }
        } catch { /* a log line */ }
      })
      me.once('exit', code => { clearTimeout(timer); reject(new Error(`monolith exited ${code}`)) })
    })
  }
  const up = await launch()
  // `taskset` execs node, so the child's pid is the monolith's.
  const alive = (): number | undefined => child.exitCode === null && child.signalCode === null ? child.pid : undefined
  return {
    gatewayUrl: up.gatewayUrl,
    cardAuthUrl: () => laneUrls['card-auth']!,
    restarts,
    pids: () => { const p = alive(); return p ? [p] : [] },
    taxPid: alive,
    stop: () => { stopping = true; return stopChild(child) },
  }
}

export async function startFleet (
  c: Common, env: Record<string, string>
): Promise<System & { apiKey: string, sandboxUrl: string }> {
  const fleet = await startLocalFleet({
    dataDir: c.dataDir,
    basePort: c.basePort,
    cpus: c.cpus,
    env: { ...env, ...c.faultEnv, FLEET_NODE_ARGS_TAX: c.taxNodeArgs.join(' '), DECK_POLL_MS: '1000' },
  })
  const sup = fleet.pid
  const procs = (): number[] => descendants(sup).filter(p => /services\/main\.js /.test(cmdline(p)))
  const isTax = (p: number): boolean => cmdline(p).trim().endsWith('services/main.js tax')
  // The preload and the heap limit reach the tax lane, and only it.
  const withPreload = procs().filter(p => cmdline(p).includes('fault-preload'))
  if (withPreload.length !== 1 || !isTax(withPreload[0]!)) {
    await fleet.stop()
    throw new Error(`the fault preload should be on the tax lane alone; it is on: ${withPreload.map(cmdline).join(' | ') || 'none'}`)
  }
  return {
    gatewayUrl: fleet.gatewayUrl,
    cardAuthUrl: () => fleet.laneUrls['card-auth'],
    apiKey: fleet.apiKey,
    sandboxUrl: fleet.sandboxUrl,
    restarts: [],
    // The fleet's own processes; the sandbox stands for the third party, PostgreSQL is shared by all topologies.
    pids: () => [sup, ...procs().filter(p => !cmdline(p).includes('tax-sandbox'))],
    taxPid: () => procs().find(isTax),
    stop: fleet.stop,
  }
}

export const DESCRIBE: Record<Topology, string> = {
  A: 'one process, one shared pool of 60, one admission limit of 500 in flight (deep queue behind it)',
  B: 'one process, per-lane admission bulkheads (75/30/15), one shared pool of 60',
  C: 'the fleet: gateway, each lane, workers and deck in their own processes, a pool and a DB role per lane',
}

export const dataDirOf = (root: string): string => path.resolve(root, '.data/bench-compare')
