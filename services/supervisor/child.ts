// One supervised child process: spawned as its own OS process from the compiled
// fleet, restarted with exponential backoff when it dies, stopped with SIGTERM
// and, if it is still there SUPERVISOR_KILL_AFTER_MS later, SIGKILL.
// Children write their logs straight to the supervisor's terminal (inherited
// stdout/stderr), not through a pipe the supervisor reads: nothing to relay per
// line, and a child whose supervisor was killed can still log its way out
// instead of blocking on a pipe nobody drains.
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import { backoffMs } from '../../shared/backoff.ts'
import { SUPERVISOR_KILL_AFTER_MS } from '../../shared/lifecycle.ts'

export interface ChildSpec {
  name: string
  /** Arguments to node: the compiled entry and the process to run (services/main.ts). */
  argv: string[]
  env: Record<string, string>
  /** Polled at start until it answers 2xx: the readiness route where the process has one. */
  healthUrl: string
  /** CPU scheduling niceness (0 = normal, 19 = lowest): the lane's priority, when the fleet shares cores. */
  nice?: number
}

export class SupervisedChild {
  readonly spec: ChildSpec
  #proc: ChildProcess | undefined
  #stopping = false
  #restarts = 0
  #startedAt = 0
  #timer: NodeJS.Timeout | undefined
  readonly #log: (line: string) => void

  constructor (spec: ChildSpec, log: (line: string) => void) {
    this.spec = spec
    this.#log = log
  }

  get pid (): number | undefined { return this.#proc?.pid }
  get restarts (): number { return this.#restarts }
  get running (): boolean {
    const p = this.#proc
    return p !== undefined && p.exitCode === null && p.signalCode === null
  }

  start (): void {
    this.#startedAt = Date.now()
    const p = spawn(process.execPath, this.spec.argv, {
      env: { ...process.env, ...this.spec.env },
      // Own process group: a terminal Ctrl-C reaches only the supervisor, which
      // stops the fleet in order. The IPC channel tells the child when we die.
      detached: true,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    })
    this.#proc = p
    p.on('error', err => this.#log(`${this.spec.name}: could not start: ${err.message}`))
    if (this.spec.nice && p.pid !== undefined) this.#setPriority(p.pid, this.spec.nice)
    p.on('exit', (code, signal) => {
      if (this.#stopping) return
      // A child that ran for a while starts its backoff afresh.
      if (Date.now() - this.#startedAt > 30_000) this.#restarts = 0
      this.#restarts++
      const delay = backoffMs(this.#restarts, { baseMs: 500, capMs: 10_000, jitter: 'none' })
      this.#log(`${this.spec.name} exited (${signal ?? code}); restart #${this.#restarts} in ${delay} ms`)
      this.#timer = setTimeout(() => this.start(), delay)
    })
  }

  #setPriority (pid: number, nice: number): void {
    try { os.setPriority(pid, nice) } catch (err) { this.#log(`${this.spec.name}: could not set CPU priority ${nice}: ${(err as Error).message}`) }
    // With Linux's scheduler autogroups (on by default on many hosts) nice only ranks
    // tasks inside one session, and every child is its own session (detached): its
    // group's nice is what the scheduler weighs against the other processes.
    const autogroup = `/proc/${pid}/autogroup`
    if (fs.existsSync(autogroup)) {
      try { fs.writeFileSync(autogroup, String(nice)) } catch (err) { this.#log(`${this.spec.name}: could not set its autogroup's CPU priority: ${(err as Error).message}`) }
    }
  }

  /** SIGTERM, then SIGKILL if it is still there after `killAfterMs`; resolves once it has exited. */
  async stop (killAfterMs = SUPERVISOR_KILL_AFTER_MS): Promise<void> {
    this.#stopping = true
    if (this.#timer) clearTimeout(this.#timer)
    const p = this.#proc
    if (!p || !this.running) return
    await new Promise<void>(resolve => {
      const kill = setTimeout(() => {
        this.#log(`${this.spec.name} still running ${killAfterMs} ms after SIGTERM: SIGKILL`)
        p.kill('SIGKILL')
      }, killAfterMs)
      p.once('exit', () => { clearTimeout(kill); resolve() })
      p.kill('SIGTERM')
    })
  }

  /** For the supervisor's last moment (it is exiting now): SIGKILL, no waiting. */
  killNow (): void {
    this.#stopping = true
    if (this.#timer) clearTimeout(this.#timer)
    if (this.running) this.#proc!.kill('SIGKILL')
  }
}

export async function waitHealthy (url: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs
  let last = ''
  while (Date.now() < until) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1_000) })
      if (res.ok) return
      last = `HTTP ${res.status}`
    } catch (err) { last = (err as Error).message }
    await sleep(200)
  }
  throw new Error(`${url} not healthy after ${timeoutMs} ms (${last})`)
}
