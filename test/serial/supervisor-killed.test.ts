// The supervisor's children never outlive it (DESIGN §2). The supervisor is
// killed with SIGKILL (it can do nothing about it) ten times, at different
// moments of a start and once the fleet is up; every process it had started
// must be gone within 35 s each time. And a start that finds one of its ports
// held says which process holds it and what to do, instead of restarting a
// child that cannot listen.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import t from 'tap'
import { testDatabase } from '../helpers/db.ts'
import { eventually } from '../helpers/http.ts'
import { fleetPorts, ROOT, running } from '../helpers/procs.ts'
import { DIST_DIR } from '../setup/state.ts'

// Ten fleet starts, two at a time: more than tap's default 180 s per file on a busy 2-core host.
t.setTimeout(420_000)

// Two fleets side by side, each with its own database, data directory and ports,
// so their kills overlap: nothing of one is shared with the other.
const taken = new Set<number>()
async function fleetSetup () {
  const db = await testDatabase(t)
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-supkill-'))
  t.teardown(() => fs.rmSync(dataDir, { recursive: true, force: true }))
  const { ports, env: portEnv } = await fleetPorts(taken)
  const env = { ...process.env, ...db.env, DATABASE_URL: db.superUrl, DATA_DIR: dataDir, FLEET_DIST: DIST_DIR, FLEET_PREBUILT: 'true', LOG_LEVEL: 'warn', QUIET: 'true', ...portEnv }
  return { ports, env }
}
const fleets = [await fleetSetup(), await fleetSetup()]

/** Every process below `pid` right now, from /proc. */
function descendants (pid: number): number[] {
  const parent = new Map<number, number>()
  for (const d of fs.readdirSync('/proc').filter(x => /^\d+$/.test(x))) {
    try { parent.set(Number(d), Number(fs.readFileSync(`/proc/${d}/stat`, 'utf8').split(') ')[1]!.split(' ')[1])) } catch { /* gone */ }
  }
  const out: number[] = []
  const walk = (p: number): void => { for (const [c, pp] of parent) if (pp === p) { out.push(c); walk(c) } }
  walk(pid)
  return out
}

function startSupervisor (env: NodeJS.ProcessEnv) {
  // Compiled, as `npm start` runs it (and a start ten times over costs ~2 s less each than under tsx).
  const sup = spawn(process.execPath, ['--expose-gc', path.join(DIST_DIR, 'services/supervisor/main.js')], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const lines: string[] = []
  readline.createInterface({ input: sup.stdout! }).on('line', l => lines.push(l))
  readline.createInterface({ input: sup.stderr! }).on('line', l => lines.push(l))
  const exited = new Promise<number | null>(resolve => sup.once('exit', code => resolve(code)))
  return { sup, lines, exited }
}

// Moments to kill at: once the first children are up (at growing delays), and once the whole fleet is.
const moments = [...[0, 300, 700, 1_000, 1_500, 2_500, 3_500, 5_000].map(ms => ({ after: 'first child' as const, ms })), ...[0, 0].map(ms => ({ after: 'fleet is up' as const, ms }))]
// Dealt out so the two fleets take about as long: the two whole starts (~10 s of
// both cores each) and the two shortest kills on one, the six longer waits (mostly
// asleep) on the other. Each fleet's runs one after another.
const first = (m: typeof moments[number]): boolean => m.after === 'fleet is up' || m.ms <= 300
const dealt = [moments.filter(first), moments.filter(m => !first(m))]

t.test('killed with SIGKILL ten times: every child is gone within 35 s each time', async t => {
  await Promise.all(fleets.map(async (fleet, f) => {
    for (const m of dealt[f]!) {
      const run = moments.indexOf(m) + 1
      const { sup, lines, exited } = startSupervisor(fleet.env)
      t.teardown(() => { if (sup.exitCode === null) sup.kill('SIGKILL') })
      const ready = m.after === 'fleet is up'
        ? await eventually(async () => lines.some(l => l.includes('fleet is up')), 120_000, 50)
        : await eventually(async () => descendants(sup.pid!).length > 0, 60_000, 20)
      t.ok(ready, `run ${run}: reached "${m.after}"${ready ? '' : `\n${lines.slice(-20).join('\n')}`}`)
      if (m.ms) await new Promise(resolve => setTimeout(resolve, m.ms))
      const kids = descendants(sup.pid!)
      sup.kill('SIGKILL')
      await exited
      const gone = await eventually(async () => kids.every(p => !running(p)), 35_000, 100)
      t.ok(gone, `run ${run} (${m.after} + ${m.ms} ms): all ${kids.length} processes it had started are gone (left: ${kids.filter(running).join(' ') || 'none'})`)
      for (const p of kids) if (running(p)) process.kill(p, 'SIGKILL')
    }
  }))
})

t.test('a port held by a stale process: named, with what to do, and no child started', async t => {
  const holder = net.createServer()
  const { ports, env } = fleets[0]!
  await new Promise<void>(resolve => holder.listen(ports.WORKER_PORT, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => holder.close(() => resolve())))
  const { sup, lines, exited } = startSupervisor(env)
  t.teardown(() => { if (sup.exitCode === null) sup.kill('SIGKILL') })
  t.equal(await exited, 1, 'the supervisor exits 1')
  const text = lines.join('\n')
  t.match(text, new RegExp(`port ${ports.WORKER_PORT} \\(worker-fraud\\) is in use by pid ${process.pid}`), 'names the port, what it is for, and the holder')
  t.match(text, /kill \d+/, 'and says what to do')
  t.notMatch(text, /restart #/, 'no restart loop')
  t.notMatch(text, /fleet is up/)
})
