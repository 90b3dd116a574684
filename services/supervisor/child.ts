// One supervised child process: spawned as its own OS process, restarted with
// exponential backoff when it dies, stopped with SIGTERM (then SIGKILL).
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import readline from 'node:readline'

export interface ChildSpec {
  name: string
  script: string
  env: Record<string, string>
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
  readonly #log: (name: string, line: string) => void

  constructor (spec: ChildSpec, log: (name: string, line: string) => void) {
    this.spec = spec
    this.#log = log
  }

  get pid (): number | undefined { return this.#proc?.pid }
  get restarts (): number { return this.#restarts }

  start (): void {
    this.#startedAt = Date.now()
    const p = spawn(process.execPath, ['--import', 'tsx', this.spec.script], {
      env: { ...process.env, ...this.spec.env },
      // Own process group: a terminal Ctrl-C reaches only the supervisor, which
      // stops the fleet in order. The IPC channel tells the child when we die.
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    })
    this.#proc = p
    if (this.spec.nice && p.pid !== undefined) {
      try { os.setPriority(p.pid, this.spec.nice) } catch (err) { this.#log('supervisor', `${this.spec.name}: could not set CPU priority ${this.spec.nice}: ${(err as Error).message}`) }
      // With Linux's scheduler autogroups (on by default on many hosts) nice only ranks
      // tasks inside one session, and every child is its own session (detached): its
      // group's nice is what the scheduler weighs against the other processes.
      const autogroup = `/proc/${p.pid}/autogroup`
      if (fs.existsSync(autogroup)) {
        try { fs.writeFileSync(autogroup, String(this.spec.nice)) } catch (err) { this.#log('supervisor', `${this.spec.name}: could not set its autogroup's CPU priority: ${(err as Error).message}`) }
      }
    }
    readline.createInterface({ input: p.stdout! }).on('line', l => this.#log(this.spec.name, l))
    readline.createInterface({ input: p.stderr! }).on('line', l => this.#log(this.spec.name, l))
    p.on('exit', (code, signal) => {
      if (this.#stopping) return
      // A child that ran for a while starts its backoff afresh.
      if (Date.now() - this.#startedAt > 30_000) this.#restarts = 0
      const delay = Math.min(10_000, 250 * 2 ** this.#restarts)
      this.#restarts++
      this.#log('supervisor', `${this.spec.name} exited (${signal ?? code}); restart #${this.#restarts} in ${delay} ms`)
      this.#timer = setTimeout(() => this.start(), delay)
    })
  }

  async stop (graceMs = 12_000): Promise<void> {
    this.#stopping = true
    if (this.#timer) clearTimeout(this.#timer)
    const p = this.#proc
    if (!p || p.exitCode !== null || p.signalCode !== null) return
    await new Promise<void>(resolve => {
      const kill = setTimeout(() => p.kill('SIGKILL'), graceMs)
      p.once('exit', () => { clearTimeout(kill); resolve() })
      p.kill('SIGTERM')
    })
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
    await new Promise(r => setTimeout(r, 200))
  }
  throw new Error(`${url} not healthy after ${timeoutMs} ms (${last})`)
}
