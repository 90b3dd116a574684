// The benchmark's tax fault preload (benchmarks/faults/) switched on and off
// through its control file, in a real process with two Fastify apps on the same
// route: the tax lane's (it serves GET /compensation) and a gateway-like one.
// CPU is read from /proc as counts of work done, never as a latency bound.
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import t from 'tap'
import { call, eventually } from './helpers/http.ts'
import { ROOT } from './helpers/procs.ts'
import { compilePreload, FaultSwitch, taxNodeArgs } from '../benchmarks/faults/control.ts'
import { cpuUs } from '../benchmarks/proc-cpu.ts'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-fault-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const preload = compilePreload(dir)
const faults = new FaultSwitch(path.join(dir, 'fault.json'), { cpuMs: 50, retainMb: 4, blockMs: 300, blockEveryMs: 1_000 })

const APP = `
import Fastify from 'fastify'
const tax = Fastify(); tax.post('/v1/tax/quotes', async () => ({ ok: 'tax' })); tax.get('/compensation', async () => ({}))
const gw = Fastify(); gw.post('/v1/tax/quotes', async () => ({ ok: 'gateway' }))
console.log(JSON.stringify({ tax: await tax.listen({ port: 0, host: '127.0.0.1' }), gw: await gw.listen({ port: 0, host: '127.0.0.1' }) }))`

const procs = new Set<ChildProcess>()
t.teardown(() => { for (const p of procs) p.kill('SIGKILL') })
async function start (heapMb = 128): Promise<{ proc: ChildProcess, tax: string, gw: string }> {
  const proc = spawn(process.execPath, [...taxNodeArgs(preload, heapMb), '--input-type=module', '-e', APP], { cwd: ROOT, env: { ...process.env, ...faults.env }, stdio: ['ignore', 'pipe', 'ignore'] })
  procs.add(proc)
  proc.once('exit', () => procs.delete(proc))
  const urls = await new Promise<{ tax: string, gw: string }>((resolve, reject) => {
    readline.createInterface({ input: proc.stdout! }).once('line', l => resolve(JSON.parse(l)))
    proc.once('exit', c => reject(new Error(`exited ${c}`)))
  })
  return { proc, ...urls }
}
const exited = (p: ChildProcess): Promise<{ code: number | null, signal: NodeJS.Signals | null }> =>
  p.exitCode !== null || p.signalCode !== null ? Promise.resolve({ code: p.exitCode, signal: p.signalCode }) : new Promise(resolve => p.once('exit', (code, signal) => resolve({ code, signal })))
/** CPU (ms) the process spent answering n quotes at `url`. */
async function cpuFor (p: ChildProcess, url: string, n: number): Promise<number> {
  const before = cpuUs(p.pid!)!
  for (let i = 0; i < n; i++) t.equal((await call(`${url}/v1/tax/quotes`, { json: {} })).status, 200)
  return (cpuUs(p.pid!)! - before) / 1000
}
/** Until the process has applied the last switch (the preload polls every 100 ms and acknowledges). */
async function applied (p: ChildProcess): Promise<void> {
  if (!await eventually(async () => faults.seenBy(p.pid!), 20_000)) throw new Error('the preload never applied the switch')
}

t.test('cpu: only the tax app\'s quotes spin, and only while the fault is on', async t => {
  const s = await start()
  const n = 20 // 20 × 50 ms of CPU = 1,000 ms when on
  faults.set('cpu'); await applied(s.proc)
  const taxOn = await cpuFor(s.proc, s.tax, n)
  const gwOn = await cpuFor(s.proc, s.gw, n)
  faults.set('none'); await applied(s.proc)
  const taxOff = await cpuFor(s.proc, s.tax, n)
  t.comment(`CPU for ${n} quotes: tax with the fault ${taxOn} ms, the gateway-like app ${gwOn} ms, tax with the fault off ${taxOff} ms`)
  t.ok(taxOn >= 500, 'with the fault on, tax quotes burn CPU')
  t.ok(gwOn < 500 && taxOff < 500, 'the same route in another app, and tax after the fault, do not')
  s.proc.kill('SIGKILL')
})

t.test('loop-block: the idle process stalls its loop while the fault is on, not after', async t => {
  const s = await start()
  const cpuMs = (): number => cpuUs(s.proc.pid!)! / 1000
  // A stall is 300 ms of CPU every second: two of them are 600 ms, however
  // long a busy machine takes to give them.
  faults.set('loop-block'); await applied(s.proc)
  const from = cpuMs()
  t.ok(await eventually(async () => cpuMs() - from >= 600, 60_000, 100), 'stalls burn CPU with nothing to serve')
  faults.set('none'); await applied(s.proc)
  const b = cpuMs()
  // A window of idle time to measure, not a wait for a condition.
  await new Promise(resolve => setTimeout(resolve, 3_000))
  const off = cpuMs() - b
  t.comment(`CPU in 3 s idle after the fault: ${off} ms`)
  t.ok(off < 250, 'none after the fault is off')
  s.proc.kill('SIGKILL')
})

t.test('memory: tax quotes pile up on the heap until the process dies at its limit', async t => {
  faults.set('memory')
  const s = await start(64)
  await applied(s.proc)
  for (let i = 0; i < 100 && s.proc.exitCode === null && s.proc.signalCode === null; i++) await call(`${s.tax}/v1/tax/quotes`, { json: {} }).catch(() => {})
  const e = await exited(s.proc)
  t.ok(e.signal === 'SIGABRT' || e.code === 134, `died of its heap limit (${e.signal ?? e.code})`)
  faults.set('none')
})

t.test('crash: a process started before the switch dies once; one started after serves', async t => {
  faults.set('none')
  const first = await start()
  faults.set('crash')
  t.same(await exited(first.proc), { code: null, signal: 'SIGKILL' }, 'killed')
  const second = await start()
  await applied(second.proc)
  t.equal((await call(`${second.tax}/v1/tax/quotes`, { json: {} })).status, 200, 'the restarted process answers with the fault still on')
  t.ok(await eventually(async () => second.proc.exitCode === null && second.proc.signalCode === null), 'and stays up')
  faults.set('none')
  second.proc.kill('SIGKILL')
})
