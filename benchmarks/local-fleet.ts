// A whole local fleet for benchmarks and drills: `npm start` (start.mjs) in its
// own data directory and ports (so it can run beside a developer's fleet),
// optionally pinned to given CPUs with taskset so the load generator does not
// compete with it for a core. The fleet starts on every CPU (eight processes
// loading TypeScript took ~40 s on one core, ~20 s on two) and is pinned, with
// every process under the supervisor, once it is up; processes started later
// (a restarted lane, a new PostgreSQL backend) inherit the pinning.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import { WORKER_LANES } from '../services/supervisor/config.ts'

export interface LocalFleet {
  gatewayUrl: string
  deckUrl: string
  adminToken: string
  laneUrls: Record<'card-auth' | 'fraud' | 'tax', string>
  sandboxUrl: string
  /** worker-tax, which runs tax-reconcile (its /status carries its provider breaker). */
  workerTaxUrl: string
  apiKey: string
  databaseUrl: string
  demoCards: Array<{ token: string, currency: string, available: number }>
  pinned: string | undefined
  /** How many processes (the supervisor and everything below it) were pinned. */
  pinnedProcesses: number
  /** The supervisor's pid. */
  pid: number
  stop (): Promise<void>
}

export const hasTaskset = (): boolean => spawnSync('taskset', ['-V']).status === 0

export async function startLocalFleet (
  opts: { dataDir: string, basePort: number, cpus?: string, env?: Record<string, string> }
): Promise<LocalFleet> {
  const b = opts.basePort
  const ports = {
    PG_PORT: b + 9,
    GATEWAY_PORT: b,
    CARD_AUTH_PORT: b + 1,
    FRAUD_PORT: b + 2,
    TAX_PORT: b + 3,
    TAX_SANDBOX_PORT: b + 5,
    DECK_PORT: b + 6,
    WORKER_PORT: b + 7,
  }
  // GATEWAY_SERVER_TIMING: the drill and the benchmarks read shed answers' timings.
  const env = {
    ...process.env,
    DATA_DIR: opts.dataDir,
    QUIET: 'true',
    LOG_LEVEL: 'warn',
    GATEWAY_SERVER_TIMING: 'on',
    ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    ...opts.env,
  }
  const pin = opts.cpus && hasTaskset() ? opts.cpus : undefined
  const root = path.resolve(import.meta.dirname, '..')
  // An IPC channel, so the supervisor drains and stops the fleet if this process dies without stopping it.
  // `npm start`'s own launcher: the supervisor compiled, as a user runs it.
  const child: ChildProcess = spawn(process.execPath, ['--expose-gc', 'services/supervisor/start.mjs'], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] })
  const lines: string[] = []
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fleet did not start:\n${lines.join('\n')}`)), 120_000)
    const onLine = (l: string): void => { lines.push(l); if (l.includes('fleet is up')) { clearTimeout(timer); resolve() } }
    readline.createInterface({ input: child.stdout! }).on('line', onLine)
    readline.createInterface({ input: child.stderr! }).on('line', onLine)
    child.once('exit', code => { clearTimeout(timer); reject(new Error(`supervisor exited ${code}:\n${lines.join('\n')}`)) })
  })
  const pinnedProcesses = pin ? pinTree(child.pid!, pin) : 0
  const creds = JSON.parse(fs.readFileSync(path.join(opts.dataDir, 'credentials.json'), 'utf8'))
  return {
    ...creds,
    laneUrls: { 'card-auth': `http://127.0.0.1:${ports.CARD_AUTH_PORT}`, fraud: `http://127.0.0.1:${ports.FRAUD_PORT}`, tax: `http://127.0.0.1:${ports.TAX_PORT}` },
    sandboxUrl: `http://127.0.0.1:${ports.TAX_SANDBOX_PORT}`,
    workerTaxUrl: `http://127.0.0.1:${ports.WORKER_PORT + WORKER_LANES.indexOf('tax')}`,
    pinned: pin,
    pinnedProcesses,
    pid: child.pid!,
    stop: () => new Promise<void>(resolve => {
      if (child.exitCode !== null) return resolve()
      child.once('exit', () => resolve())
      child.kill('SIGTERM')
    }),
  }
}

/** Pin a process (this one by default) to the given CPUs (when taskset exists). */
export function pinSelf (cpus: string, pid = process.pid): boolean {
  return hasTaskset() && pin(pid, cpus).status === 0
}

/** Every thread of one process to `cpus`. */
const pin = (pid: number, cpus: string) => spawnSync('taskset', ['-a', '-cp', cpus, String(pid)])

/** The pids of every process below `root` (from /proc/<pid>/stat's ppid). */
export function descendants (root: number): number[] {
  const children = new Map<number, number[]>()
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue
    let stat: string
    try { stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8') } catch { continue } // gone meanwhile
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
    const siblings = children.get(ppid)
    if (siblings) siblings.push(Number(d)); else children.set(ppid, [Number(d)])
  }
  const out: number[] = []
  const walk = (p: number): void => { for (const c of children.get(p) ?? []) { out.push(c); walk(c) } }
  walk(root)
  return out
}

/**
 * Pin a process and everything below it, every thread, to `cpus`. Twice: a
 * process forked by a parent between the listing and the parent's own pinning
 * is caught by the second pass; after it, new processes inherit the pinning.
 */
export function pinTree (root: number, cpus: string): number {
  let pids: number[] = []
  for (let pass = 0; pass < 2; pass++) {
    pids = [root, ...descendants(root)]
    for (const pid of pids) {
      // A process that exited meanwhile is not an error.
      const r = pin(pid, cpus)
      if (r.status !== 0 && fs.existsSync(`/proc/${pid}`)) throw new Error(`taskset ${cpus} ${pid}: ${String(r.stderr)}`)
    }
  }
  return pids.length
}
