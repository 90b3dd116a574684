// `npm start` as the README gives it, through npm itself: it compiles the fleet
// with the supervisor in it and runs that supervisor compiled (no TypeScript
// loader in any long-running process), and a SIGTERM to npm alone, as a process
// manager stopping `npm start` sends it, drains and stops the whole fleet: npm's
// `sh -c` passes no signal on, and it had left every process running.
// "Up" means ready: with card-auth's role held so its pool cannot warm, the
// supervisor does not say the fleet is up until it can.
// (DATABASE_URL points it at the test's database instead of a second embedded server.)
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import pg from 'pg'
import t from 'tap'
import { laneLimits } from '../../shared/lanes.ts'
import { testDatabase } from '../helpers/db.ts'
import { eventually } from '../helpers/http.ts'
import { fleetPorts, ROOT, running } from '../helpers/procs.ts'
import { DIST_DIR } from '../setup/state.ts'

const db = await testDatabase(t)
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-npm-start-'))
// Inside the repo (node_modules must resolve), beside the run's own build.
const dist = path.join(path.dirname(DIST_DIR), 'npm-start-dist')
t.teardown(() => {
  fs.rmSync(dataDir, { recursive: true, force: true })
  fs.rmSync(dist, { recursive: true, force: true })
})
const { env: portEnv, ports } = await fleetPorts()
// All but one of card-auth's connections held: the lane starts and listens on
// that one, and stays warming (alive, not ready) until the test lets go.
const role = laneLimits('card-auth', db.env).db.role
const [{ limit } = { limit: 0 }] = await db.query<{ limit: number }>('select rolconnlimit as limit from pg_roles where rolname = $1', [role])
const held: pg.Client[] = []
const release = async (): Promise<void> => { await Promise.all(held.splice(0).map(c => c.end().catch(() => {}))) }
t.teardown(release)
for (let i = 0; i < limit - 1; i++) {
  const c = new pg.Client({ connectionString: db.roleUrl(role), application_name: 'npm-start-holder' })
  await c.connect()
  held.push(c)
}
const npm = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ['npm']
const proc = spawn(npm[0]!, [...npm.slice(1), 'start'], {
  cwd: ROOT,
  env: { ...process.env, ...db.env, DATABASE_URL: db.superUrl, DATA_DIR: dataDir, FLEET_DIST: path.relative(ROOT, dist), LOG_LEVEL: 'warn', ...portEnv },
  stdio: ['ignore', 'pipe', 'pipe'],
})
const lines: string[] = []
readline.createInterface({ input: proc.stdout! }).on('line', l => lines.push(l))
readline.createInterface({ input: proc.stderr! }).on('line', l => lines.push(l))
const parentOf = (pid: number): number => Number(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ')[1])
const cmdline = (pid: number): string[] => fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean)
const started: number[] = []
t.teardown(() => {
  for (const pid of [proc.pid!, ...started]) if (running(pid)) process.kill(pid, 'SIGKILL')
})

t.test('npm start runs the supervisor compiled; SIGTERM to npm alone stops the whole fleet', async t => {
  const lane = `http://127.0.0.1:${ports.CARD_AUTH_PORT}`
  const warming = await eventually(async () => {
    const r = await fetch(`${lane}/health/ready`).catch(() => undefined)
    return r?.status === 503 && ((await r.json()) as { warming?: boolean }).warming === true ? true : undefined
  }, 120_000, 100)
  t.ok(warming, 'card-auth listens, warming, while its role is held')
  // Every other process alive: a supervisor that went by liveness would say "up" within its 200 ms poll.
  const others = [
    ports.GATEWAY_PORT, ports.FRAUD_PORT, ports.TAX_PORT, ports.DECK_PORT, ports.WORKER_PORT, ports.WORKER_PORT + 1,
  ]
  const alive = await eventually(async () => (await Promise.all(others.map(p => fetch(`http://127.0.0.1:${p}/health/live`).then(r => r.ok, () => false)))).every(Boolean) || undefined, 120_000, 100)
  t.ok(alive, 'every other process alive')
  const early = await eventually(async () => lines.some(l => l.includes('fleet is up')) || undefined, 3_000, 100)
  t.notOk(early, 'and the fleet is not up while a lane is not ready (3 s: 15 of the supervisor\'s polls)')
  await release()
  const up = await eventually(async () => lines.find(l => l.includes('fleet is up')), 120_000, 100)
  if (!up) return t.fail(`the fleet did not come up:\n${lines.slice(-40).join('\n')}`)
  t.ok(lines.some(l => l.includes(`compiling the fleet to ${path.relative(ROOT, dist)}/`)), 'it compiled the fleet first')
  const pids = [...up.matchAll(/([a-z-]+)=(\d+)/g)].map(m => Number(m[2]))
  t.equal(pids.length, 8, 'eight children')
  const supervisor = parentOf(pids[0]!)
  started.push(supervisor, ...pids)
  t.ok(pids.every(pid => parentOf(pid) === supervisor), 'one supervisor is the parent of every child')
  t.same(cmdline(supervisor).slice(1), ['--expose-gc', 'services/supervisor/start.mjs'], 'the supervisor process is `node --expose-gc services/supervisor/start.mjs`: no TypeScript loader')
  t.ok(fs.existsSync(path.join(dist, 'services/supervisor/main.js')), 'its code is the compiled supervisor in FLEET_DIST')
  for (const pid of pids) t.same(cmdline(pid).slice(1, 3), ['--expose-gc', path.join(dist, 'services/main.js')], `child ${pid} runs the same compiled tree, with the gc its idle trim calls`)
  t.equal((await fetch(`${lane}/health/ready`)).status, 200, 'card-auth ready once the fleet is up')

  const exited = new Promise<number | null>(resolve => proc.once('exit', code => resolve(code)))
  proc.kill('SIGTERM') // npm only, not its process group
  await exited
  const gone = await eventually(async () => [supervisor, ...pids].every(pid => !running(pid)) || undefined, 60_000, 100)
  t.ok(gone, `supervisor and children gone (left: ${[supervisor, ...pids].filter(running).join(' ') || 'none'})`)
  t.ok(lines.some(l => l.includes('draining the gateway, then the lanes')), 'the supervisor drained in order')
  const stopped = lines.some(l => l === '[supervisor] stopped')
  t.ok(stopped, `and said it stopped${stopped ? '' : '\n' + lines.filter(l => l.startsWith('[')).slice(-6).join('\n')}`)
})
