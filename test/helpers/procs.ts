// Real child processes for tests: each service is started as its own OS process
// on port 0; the port is read from Fastify's "Server listening at" log line.
// Every process is killed at teardown, and its log is printed when a test fails.
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import readline from 'node:readline'
import type { Test } from 'tap'
import { DIST_DIR, RUN_ID } from '../setup/state.ts'

export const ROOT = path.resolve(import.meta.dirname, '../..')

/**
 * Node's arguments to run one of the repo's TypeScript files the way tap loads the
 * tests (test/setup/ts-hooks.mjs). Every test process compiles a file the same
 * way, so the coverage that several of them report for it merges line for line.
 */
export const TS_LOADER = ['--import', path.join(ROOT, 'test/setup/ts-register.mjs')]

// Coverage: tap's processinfo, imported into every Node process through
// NODE_OPTIONS, measures the child processes a test starts too (the fleet's
// bundles map back to their sources through their source maps). One killed with
// SIGKILL writes none. `NO_COVERAGE` in a child's environment turns it off there.
export const NO_COVERAGE = { _TAPJS_PROCESSINFO_COVERAGE_: '0' }

/** A process's state letter from /proc/<pid>/stat (R, S, D, Z, ...), or undefined once it is gone. */
export function processState (pid: number): string | undefined {
  let stat: string
  try { stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8') } catch { return undefined }
  const end = stat.lastIndexOf(')') // the command name may itself hold ')'
  return stat.slice(end + 2, end + 3)
}

/**
 * Whether a process is still running: it exists and has not exited. An exited
 * process whose parent is gone stays a zombie (state Z) until its new parent,
 * PID 1, reaps it, which here can take seconds; it holds no port, socket,
 * memory or CPU any more, so it counts as gone.
 */
export function running (pid: number): boolean {
  const state = processState(pid)
  return state !== undefined && state !== 'Z'
}

// Children still running when this test process exits (a crash at top level
// skips the teardowns): killed at once, not waited for.
const live = new Set<ChildProcess>()
process.once('exit', () => { for (const p of live) p.kill('SIGKILL') })

export interface Proc {
  name: string
  url: string
  proc: ChildProcess
  log: string[]
  kill (signal?: NodeJS.Signals): Promise<void>
}

/** Where a source file of the fleet runs from: its compiled twin in the run's build (test/setup/before.ts). */
export function compiled (script: string): string {
  const file = path.resolve(ROOT, script)
  return file.endsWith('.ts') ? path.join(DIST_DIR, path.relative(ROOT, file)).replace(/\.ts$/, '.js') : file
}

/**
 * `script` is a source .ts of the fleet (run compiled, as npm start runs it) or a
 * compiled .js, relative to the repo or absolute; `args` follow it.
 */
export async function startProcess (
  t: Test, name: string, script: string, env: Record<string, string>, opts: { timeoutMs?: number, args?: string[] } = {}
): Promise<Proc> {
  // As every launcher of the fleet starts it (shared/idle-trim.ts).
  const node = ['--expose-gc', compiled(script)]
  // A gateway's warm-up (gateway/warm-up.ts) would send its lanes authorizations
  // beside a test's own traffic: off unless a test asks for it
  // (test/gateway-warm-up.test.ts); npm start's fleets keep the default.
  const defaults = name === 'gateway' ? { GATEWAY_WARM_UP_REQUESTS: '0' } : {}
  const proc = spawn(process.execPath, [...node, ...(opts.args ?? [])], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', ...defaults, ...env },
    // The IPC channel is how every fleet process learns its parent is gone
    // (it drains and exits on 'disconnect'), so a test file that crashes or is
    // killed leaves nothing running.
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  })
  live.add(proc)
  proc.once('exit', () => live.delete(proc))
  const log: string[] = []
  const kill = async (signal: NodeJS.Signals = 'SIGTERM'): Promise<void> => {
    if (proc.exitCode !== null || proc.signalCode !== null) return
    await new Promise<void>(resolve => {
      proc.once('exit', () => resolve())
      proc.kill(signal)
      setTimeout(() => proc.kill('SIGKILL'), 10_000).unref()
    })
  }
  // Registered before the process is even up: a start that fails (or a sibling
  // start that fails first) must not leave this one running after the test.
  t.teardown(async () => {
    if (!t.passing()) t.comment(`--- ${name} log (last 40 lines) ---\n${log.slice(-40).join('\n')}`)
    await kill()
  })
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not listen in time:\n${log.join('\n')}`)), opts.timeoutMs ?? 30_000)
    const onLine = (line: string): void => {
      log.push(line)
      if (log.length > 2_000) log.shift()
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(line)
      if (m) { clearTimeout(timer); resolve(m[1]!) }
    }
    readline.createInterface({ input: proc.stdout! }).on('line', onLine)
    readline.createInterface({ input: proc.stderr! }).on('line', onLine)
    proc.once('exit', code => { clearTimeout(timer); reject(new Error(`${name} exited with ${code}:\n${log.join('\n')}`)) })
  })
  return { name, url, proc, log, kill }
}

/** A lane process on port 0 against a test database. */
export function laneEnv (lane: 'card-auth' | 'fraud' | 'tax', dbEnv: Record<string, string>, databaseUrl: string, extra: Record<string, string> = {}): Record<string, string> {
  const p = lane.toUpperCase().replace('-', '_') + '_'
  return { ...dbEnv, DATABASE_URL: databaseUrl, [`${p}PORT`]: '0', ...extra }
}

/** A server listening on 127.0.0.1:port (0: any free port), or undefined if it could not. */
const listenOn = (port: number): Promise<net.Server | undefined> => new Promise(resolve => {
  const s = net.createServer()
  s.once('error', () => resolve(undefined))
  s.listen(port, '127.0.0.1', () => resolve(s))
})
const close = (s: net.Server): Promise<void> => new Promise(resolve => s.close(() => resolve()))

// A port a test hands to a process it starts is chosen below the kernel's range
// for the local ports of outgoing connections (net.ipv4.ip_local_port_range): a
// port from that range, free when chosen, can be taken by any connection before
// the process listens on it (a CI run lost a supervisor fleet that way: its tax
// worker found its port held by a connection and failed for 90 s). Each port is
// also reserved for the run (a file in the run's directory, created exclusively),
// so test files running side by side never choose the same one.
const PORTS_FROM = 10_000
const RESERVED_DIR = path.resolve(`.data/test-run-${RUN_ID}/ports`)

function localPortRangeStart (): number {
  try { return Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 32_768 } catch { return 32_768 }
}

/** Claims `port` for this run; false when a test of the run already has it. */
function reserve (port: number): boolean {
  fs.mkdirSync(RESERVED_DIR, { recursive: true })
  try { fs.writeFileSync(path.join(RESERVED_DIR, String(port)), '', { flag: 'wx' }); return true } catch { return false }
}

export async function freePort (): Promise<number> {
  const below = localPortRangeStart()
  if (below - PORTS_FROM >= 1_000) {
    for (let attempt = 0; attempt < 200; attempt++) {
      const port = PORTS_FROM + Math.floor(Math.random() * (below - PORTS_FROM))
      if (!reserve(port)) continue
      const s = await listenOn(port)
      if (!s) continue
      await close(s)
      return port
    }
  }
  // No room below the range (a tuned host): any free port, as the kernel picks it.
  const s = await listenOn(0)
  if (!s) throw new Error('no free port on 127.0.0.1')
  const p = (s.address() as net.AddressInfo).port
  await close(s)
  return p
}

/**
 * The first of `n` consecutive free ports, none of them in `avoid` (the ports a
 * test already chose): the supervisor gives its second worker WORKER_PORT + 1, a
 * port nobody checked when WORKER_PORT came from freePort() (one CI run found it
 * held by another socket, and the fleet refused to start).
 */
export async function freePorts (n: number, avoid: Iterable<number> = []): Promise<number> {
  const taken = new Set(avoid)
  for (let attempt = 0; attempt < 50; attempt++) {
    const first = await freePort()
    if (first + n - 1 > 65_535 || Array.from({ length: n }, (_v, i) => first + i).some(p => taken.has(p))) continue
    if (!Array.from({ length: n - 1 }, (_v, i) => first + 1 + i).every(reserve)) continue
    const held = await Promise.all(Array.from({ length: n }, (_v, i) => listenOn(first + i)))
    await Promise.all(held.map(s => s && close(s)))
    if (held.every(Boolean)) return first
  }
  throw new Error(`no ${n} consecutive free ports found on 127.0.0.1`)
}

/**
 * Ports for a whole fleet under test (npm start's supervisor): one for each
 * process, and GATEWAY_PORT and WORKER_PORT each with the next one free, for a
 * second gateway and the second worker. None is
 * in `avoid`, and each is added to it, so fleets started side by side share none.
 * `env`: the same, as the supervisor reads them.
 */
export async function fleetPorts (avoid = new Set<number>()) {
  const one = async (): Promise<number> => { const p = await freePorts(1, avoid); avoid.add(p); return p }
  // The gateway's next port too: npm start with GATEWAY_REPLICAS=2 puts the second gateway there.
  const gateway = await freePorts(2, avoid)
  avoid.add(gateway).add(gateway + 1)
  const ports = {
    GATEWAY_PORT: gateway,
    TAX_SANDBOX_PORT: await one(),
    CARD_AUTH_PORT: await one(),
    FRAUD_PORT: await one(),
    TAX_PORT: await one(),
    DECK_PORT: await one(),
    WORKER_PORT: await freePorts(2, avoid),
  }
  avoid.add(ports.WORKER_PORT).add(ports.WORKER_PORT + 1)
  return { ports, env: Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])) }
}
