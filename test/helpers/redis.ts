// A Redis server of a test's own (Debian's redis-server, .ci/system-deps), on
// a free loopback port, nothing persisted; stopped at the test's end, on the
// failure path too. It can be paused (SIGSTOP: a hung store), killed, and
// started again on the same port.
import { spawn, type ChildProcess } from 'node:child_process'
import readline from 'node:readline'
import type { Test } from 'tap'
import { freePort } from './procs.ts'

export interface TestRedis {
  url: string
  port: number
  /** The running server's process (a new one after `restart`). */
  proc (): ChildProcess
  pause (): void
  resume (): void
  kill (): Promise<void>
  /** A new server on the same port (after `kill`). */
  restart (): Promise<void>
}

// A test process that ends another way (an uncaught error) kills its servers too, as procs.ts does its children.
const live = new Set<ChildProcess>()
process.once('exit', () => { for (const p of live) p.kill('SIGKILL') })

async function launch (port: number): Promise<ChildProcess> {
  const proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], { stdio: ['ignore', 'pipe', 'pipe'] })
  live.add(proc)
  proc.once('exit', () => live.delete(proc))
  const log: string[] = []
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start on ${port}:\n${log.join('\n')}`)), 10_000)
    // At loglevel warning it prints nothing when ready: a PING that answers is the sign.
    const poll = setInterval(() => {
      const ping = spawn('redis-cli', ['-p', String(port), 'ping'], { stdio: ['ignore', 'pipe', 'ignore'] })
      let out = ''
      ping.stdout.on('data', d => { out += String(d) })
      ping.once('exit', () => { if (out.trim() === 'PONG') { clearInterval(poll); clearTimeout(timer); resolve() } })
    }, 50)
    readline.createInterface({ input: proc.stderr! }).on('line', l => log.push(l))
    readline.createInterface({ input: proc.stdout! }).on('line', l => log.push(l))
    proc.once('exit', code => { clearInterval(poll); clearTimeout(timer); reject(new Error(`redis-server exited with ${code}:\n${log.join('\n')}`)) })
  })
  return proc
}

const stop = async (p: ChildProcess): Promise<void> => {
  if (p.exitCode !== null || p.signalCode !== null) return
  await new Promise<void>(resolve => { p.once('exit', () => resolve()); p.kill('SIGCONT'); p.kill('SIGKILL') })
}

export async function startRedis (t: Test): Promise<TestRedis> {
  const port = await freePort()
  let proc = await launch(port)
  t.teardown(async () => { await stop(proc) })
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    proc: () => proc,
    pause: () => { proc.kill('SIGSTOP') },
    resume: () => { proc.kill('SIGCONT') },
    kill: async () => { await stop(proc) },
    restart: async () => { await stop(proc); proc = await launch(port) },
  }
}
