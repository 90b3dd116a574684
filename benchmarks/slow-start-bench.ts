// `npm run bench -- slow-start`: what a card-auth replica that has just started
// costs the traffic it receives, against the same run's steady state.
//
// - `npm start` (--target local): the fleet started, then card authorizations
//   open loop at once; the first 5 s against the run's last 15 s.
// - Compose (--target compose): the real stack with card-auth at one replica
//   under open-loop load, then `--scale card-auth=2`; the 5 s after the gateway
//   first counts the new replica ready against the 15 s before the scale-out
//   and the run's last 10 s (both replicas warm, the ramp long over).
//
// Issue 41's target for each: p99 no worse than 2x the steady p99 and no more
// 429s than the steady share. Figures are printed with the command; nothing
// here is asserted.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import * as hdr from 'hdr-histogram-js'
import pg from 'pg'
import { Pool } from 'undici'
import { loadCardToken, seedLoadCards } from '../services/card-auth/seed.ts'
import { createKey } from '../shared/api-keys.ts'
import {
  buildImages, composeCommand, composeExec, down, ensureBaseImages, ensureEngine, ensureSecrets,
  expectedContainers, stackOf, up, waitHealthy, writeCredentials, type StackOptions,
} from '../deploy/compose/stack.ts'
import { newHistogram, runOpenLoop } from './open-loop.ts'
import { descendants, startLocalFleet } from './local-fleet.ts'
import { cpuByPid, cpuDeltaByLabel, cpuUs, fleetProcesses } from './proc-cpu.ts'
import { gatewayPost, gitCommit, machine, numberFlag, parseFlags, sleep } from './run-info.ts'

const execFileP = promisify(execFile)

const { values: a } = parseFlags({
  options: {
    target: { type: 'string', default: 'both' },
    'local-rate': { type: 'string', default: '1400' },
    'compose-rate': { type: 'string', default: '200' },
    seconds: { type: 'string', default: '30' },
    'base-port': { type: 'string', default: '18680' },
    // Diagnosis: how long the fleet idles between up and the load.
    'idle-ms': { type: 'string', default: '0' },
  }
}, 'usage: npm run bench -- slow-start [--target local|compose|both] [--local-rate N] [--compose-rate N] [--seconds N] [--idle-ms N]')
if (!['local', 'compose', 'both'].includes(a.target!)) { console.error('--target must be local, compose or both'); process.exit(2) }
const seconds = numberFlag(a, 'seconds', 20, 600)
const localRate = numberFlag(a, 'local-rate', 1, 10_000)
const composeRate = numberFlag(a, 'compose-rate', 1, 10_000)
const basePort = numberFlag(a, 'base-port', 1_024, 60_000)
const command = `npm run bench -- slow-start --target ${a.target} --local-rate ${localRate} --compose-rate ${composeRate} --seconds ${seconds}`

/** Every answer of a run: when it was scheduled (ms from the run's start), its latency, its status. */
class Answers {
  readonly at: number[] = []
  readonly us: number[] = []
  readonly status: string[] = []
  t0 = performance.now()
  add (scheduledAt: number, latencyUs: number, status: string): void {
    this.at.push(scheduledAt - this.t0)
    this.us.push(latencyUs)
    this.status.push(status)
  }

  /** The answers scheduled in [fromMs, toMs) of the run. */
  window (name: string, fromMs: number, toMs: number): Window {
    const h: hdr.Histogram = newHistogram()
    const statuses: Record<string, number> = {}
    for (let i = 0; i < this.at.length; i++) {
      if (this.at[i]! < fromMs || this.at[i]! >= toMs) continue
      h.recordValue(this.us[i]!)
      statuses[this.status[i]!] = (statuses[this.status[i]!] ?? 0) + 1
    }
    return {
      name,
      fromMs,
      toMs,
      n: h.totalCount,
      p50Ms: h.getValueAtPercentile(50) / 1000,
      p99Ms: h.getValueAtPercentile(99) / 1000,
      statuses,
    }
  }
}
interface Window {
  name: string, fromMs: number, toMs: number, n: number, p50Ms: number, p99Ms: number, statuses: Record<string, number>
}

const count429 = (w: Window): number =>
  Object.entries(w.statuses).filter(([k]) => k.startsWith('429')).reduce((n, [, v]) => n + v, 0)
const share429 = (w: Window): number => count429(w) / Math.max(1, w.n)
const row = (w: Window): string => `| ${w.name} | ${(w.fromMs / 1000).toFixed(1)}–${(w.toMs / 1000).toFixed(1)} s | ${w.n} | ${w.p50Ms.toFixed(1)} | ${w.p99Ms.toFixed(1)} | ${(share429(w) * 100).toFixed(2)}% | ${JSON.stringify(w.statuses)} |`
function verdict (fresh: Window, steady: Window): string {
  const ratio = fresh.p99Ms / steady.p99Ms
  const expected = Math.ceil(share429(steady) * fresh.n)
  return `${fresh.name} vs ${steady.name}: p99 ${ratio.toFixed(2)}x (target <= 2x: ${ratio <= 2 ? 'met' : 'missed'}); 429s ${count429(fresh)} where the steady share gives ${expected} (no extra: ${count429(fresh) <= expected ? 'met' : 'missed'})`
}

/** Card authorizations at `rate` through `gatewayUrl` for `ms`, every answer kept; `during` runs beside it. */
async function load (
  gatewayUrl: string,
  apiKey: string,
  rate: number,
  ms: number,
  during: (answers: Answers) => Promise<void> = async () => {}
): Promise<Answers> {
  const gw = new Pool(gatewayUrl, { connections: 256 })
  const answers = new Answers()
  // A refusal is counted by its status and code (a lane's 429 and the gateway's look alike otherwise).
  const codes = new Map<number, string>()
  const send = async (i: number): Promise<number> => {
    const r = await gatewayPost(gw, apiKey, '/v1/authorizations', `slow-${process.pid}-${Date.now()}-${i}`, {
      merchantId: 'm_slow_start',
      cardToken: loadCardToken(i + 1),
      amount: { value: 1, currency: 'EUR' },
    })
    if (r.statusCode === 201) { await r.body.dump(); return 201 }
    const code = ((await r.body.json().catch(() => ({}))) as { code?: string }).code
    if (code) codes.set(i, code)
    return r.statusCode
  }
  try {
    answers.t0 = performance.now()
    const run = runOpenLoop({
      rate,
      durationMs: ms,
      send,
      onResult: (i, at, us, status) => {
        answers.add(at, us, codes.has(i) ? `${status} ${codes.get(i)!}` : status)
        codes.delete(i)
      },
    })
    await during(answers)
    await run
    return answers
  } finally {
    await gw.close()
  }
}

/**
 * The load generator's own code compiled before it measures anything: the
 * same sends at the same rate against a bare server in this process, so its
 * first seconds (its undici pool, the open loop, the histograms) are not
 * counted against the fleet's. Left out, they cost the generator ~1.7x its
 * steady CPU in the first 5 s, on the same two cores as the fleet. V8 goes on
 * compiling it for several seconds: after 3 s of this, a new run's first
 * second still cost the generator ~2.2x its steady CPU (0.22–0.25 of a core
 * against 0.10, against a server answering in 10 ms); after 10 s, ~1.4x.
 */
async function warmGenerator (rate: number): Promise<void> {
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => { res.writeHead(201, { 'content-type': 'application/json' }).end('{"id":"warm","status":"approved"}') })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  try {
    await load(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, 'warm', rate, 10_000)
  } finally {
    server.closeAllConnections()
    await new Promise(resolve => server.close(resolve))
  }
}

async function local (): Promise<string[]> {
  await warmGenerator(localRate)
  // A fresh data directory: the cold start of `npm start` on a new machine.
  const dataDir = '.data/bench-slow-start'
  fs.rmSync(dataDir, { recursive: true, force: true })
  const t0 = Date.now()
  const fleet = await startLocalFleet({ dataDir, basePort })
  const upMs = Date.now() - t0
  try {
    const db = new pg.Client({ connectionString: fleet.databaseUrl })
    await db.connect()
    await seedLoadCards(db, 1_000)
    await sleep(numberFlag(a, 'idle-ms', 0, 600_000))
    // CPU of every process and PostgreSQL backend (by role), in the first 5 s and the steady 15 s.
    const cpu: Array<Map<string, number>> = []
    const r = await load(fleet.gatewayUrl, fleet.apiKey, localRate, seconds * 1000, async answers => {
      for (const [from, to] of [[0, 5_000], [(seconds - 15) * 1000, seconds * 1000]] as const) {
        await sleep(from - (performance.now() - answers.t0))
        const procs = await fleetProcesses(fleet.pid, db, { [process.pid]: 'load generator' })
        procs.set(process.pid, 'load generator')
        const before = cpuByPid(procs)
        await sleep(to - (performance.now() - answers.t0))
        const after = cpuByPid(procs)
        cpu.push(cpuDeltaByLabel(procs, before, after))
      }
    })
    await db.end()
    const fresh = r.window('first 5 s', 0, 5_000)
    const steady = r.window('steady', (seconds - 15) * 1000, seconds * 1000)
    const labels = [...new Set(cpu.flatMap(m => [...m.keys()]))]
      .filter(l => cpu.some(m => (m.get(l) ?? 0) >= 50_000))
      .sort()
    const share = (m: Map<string, number>, l: string, ms: number): string => ((m.get(l) ?? 0) / 1000 / ms).toFixed(2)
    return [
      `### npm start: the fleet up in ${(upMs / 1000).toFixed(0)} s, then ${localRate} authorizations/s at once`, '',
      '| window | scheduled | answers | p50 ms | p99 ms | 429 | statuses |', '|---|---|---|---|---|---|---|',
      row(fresh),
      ...[0, 1, 2, 3, 4].map(k => row(r.window(`  second ${k + 1}`, k * 1000, (k + 1) * 1000))),
      row(r.window('5–10 s', 5_000, 10_000)),
      row(steady), '',
      verdict(fresh, steady), '',
      'CPU (cores busy, from /proc/<pid>/stat; PostgreSQL backends by role):', '',
      '| process | first 5 s | steady |', '|---|---|---|',
      ...labels.map(l => `| ${l} | ${share(cpu[0]!, l, 5_000)} | ${share(cpu[1]!, l, 15_000)} |`), '',
    ]
  } finally {
    await fleet.stop()
  }
}

/** The gateway's ready card-auth replicas, by address, from its metrics. */
async function readyReplicas (gatewayUrl: string): Promise<string[]> {
  const text = await (await fetch(`${gatewayUrl}/metrics`)).text()
  return [...text.matchAll(/^gateway_upstream_replica_state\{(.*)\} 1$/gm)].map(m => m[1]!)
    .filter(l => l.includes('lane="card-auth"') && l.includes('state="ready"')).map(l => /replica="([^"]+)"/.exec(l)![1]!)
}

/** CPU µs so far of each container of the stack (its process and all below it), by container name. */
async function containerCpu (project: string): Promise<Map<string, number>> {
  const ids = (await execFileP('docker', ['ps', '-q', '--filter', `label=com.docker.compose.project=${project}`])).stdout.split('\n').filter(Boolean)
  const out = new Map<string, number>()
  if (ids.length === 0) return out
  const rows = (await execFileP('docker', ['inspect', '--format', '{{.Name}} {{.State.Pid}}', ...ids])).stdout.trim().split('\n')
  for (const r of rows) {
    const [name, pid] = r.split(' ')
    const total = [Number(pid), ...descendants(Number(pid))].reduce((n, p) => n + (cpuUs(p) ?? 0), 0)
    out.set(name!.replace(/^\//, '').replace(`${project}_`, '').replace(`${project}-`, ''), total)
  }
  return out
}

async function compose (): Promise<string[]> {
  const say = (l: string): void => { console.error(`[compose] ${l}`) }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-slow-start-compose-'))
  fs.mkdirSync(path.join(dir, 'keys'))
  const apiKey = createKey(path.join(dir, 'keys/api-keys.json'), 'slow-start')
  const override = path.join(dir, 'override.yml')
  fs.writeFileSync(override, `services:\n  gateway:\n    volumes: ["${path.join(dir, 'keys')}:/run/watertight/keys:ro"]\n`)
  const o: StackOptions = {
    project: `wt-slow-start-${process.pid}`,
    gatewayPort: basePort + 10,
    deckPort: basePort + 11,
    overrides: [override],
    log: say,
  }
  await ensureEngine(say)
  const s = stackOf(await composeCommand(), o)
  const remove = async (): Promise<void> => {
    await down(s, { volumes: true }).catch(err => say(`down failed: ${(err as Error).message}`))
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const onSignal = (): void => { void remove().finally(() => process.exit(130)) }
  process.once('SIGINT', onSignal)
  process.once('SIGTERM', onSignal)
  try {
    await buildImages(await ensureBaseImages(say), say)
    const secrets = ensureSecrets()
    await up(s, o)
    await waitHealthy(s, expectedContainers(o))
    const creds = await writeCredentials(s, o, { apiKey, adminToken: secrets.ADMIN_TOKEN! }, path.join(dir, 'credentials.json'))
    const seeded = await composeExec(s, ['run', '--rm', '-T', '--no-deps', 'migrate', 'seed-cards', '1000'])
    if (seeded.code !== 0) throw new Error(`seeding load cards failed: ${seeded.err}`)
    const scaleAtMs = 30_000
    let scaledAt = 0
    let readyAt = 0
    const total = scaleAtMs + seconds * 1000
    const cpuAt: Array<Map<string, number>> = []
    const snap = async (): Promise<void> => { cpuAt.push(await containerCpu(o.project)) }
    const r = await load(creds.gatewayUrl, creds.apiKey, composeRate, total, async answers => {
      const before = await readyReplicas(creds.gatewayUrl)
      const at = (ms: number): Promise<void> => sleep(ms - (performance.now() - answers.t0))
      await at(scaleAtMs - 15_000)
      await snap()
      await at(scaleAtMs)
      await snap()
      scaledAt = performance.now() - answers.t0
      const scaled = await composeExec(s, ['up', '-d', '--no-build', '--no-deps', '--no-recreate', '--scale', 'card-auth=2', 'card-auth'])
      if (scaled.code !== 0) throw new Error(`scale-out failed: ${scaled.err}`)
      while (performance.now() - answers.t0 < total) {
        const now = await readyReplicas(creds.gatewayUrl)
        if (now.some(x => !before.includes(x))) { readyAt = performance.now() - answers.t0; break }
        await sleep(100)
      }
      if (!readyAt) return
      await snap()
      await at(readyAt + 5_000)
      await snap()
      await at(total - 10_000)
      await snap()
    })
    await snap()
    if (!readyAt) throw new Error('the new card-auth replica never turned ready at the gateway')
    const steadyBefore = r.window('steady, one replica', scaleAtMs - 15_000, scaleAtMs)
    const fresh = r.window('new replica\'s first 5 s', readyAt, readyAt + 5_000)
    const steadyAfter = r.window('steady, two replicas', total - 10_000, total)
    return [
      `### Compose: card-auth scaled from 1 to 2 under ${composeRate} authorizations/s`, '',
      `Scale-out at ${(scaledAt / 1000).toFixed(1)} s; the gateway counted the new replica ready at ${(readyAt / 1000).toFixed(1)} s.`, '',
      '| window | scheduled | answers | p50 ms | p99 ms | 429 | statuses |', '|---|---|---|---|---|---|---|',
      row(r.window('cold: the stack\'s first 5 s', 0, 5_000)),
      row(steadyBefore),
      row(r.window('while the new replica starts', scaledAt, readyAt)),
      row(fresh),
      row(steadyAfter), '',
      verdict(fresh, steadyBefore), '', verdict(fresh, steadyAfter), '',
      'CPU by container (cores busy, from /proc/<pid>/stat of its processes):', '',
      '| container | steady, one replica | new replica\'s first 5 s | steady, two replicas |', '|---|---|---|---|',
      ...[...cpuAt.at(-1)!.keys()].sort().map(name => {
        const busy = (a: number, b: number, ms: number): string => {
          const d = (cpuAt[b]?.get(name) ?? NaN) - (cpuAt[a]?.get(name) ?? NaN)
          return Number.isFinite(d) ? (d / 1000 / ms).toFixed(2) : '–'
        }
        return `| ${name} | ${busy(0, 1, 15_000)} | ${busy(2, 3, 5_000)} | ${busy(4, 5, 10_000)} |`
      }), '',
    ]
  } finally {
    await remove()
    process.off('SIGINT', onSignal)
    process.off('SIGTERM', onSignal)
  }
}

const out: string[] = []
if (a.target !== 'compose') out.push(...await local())
if (a.target !== 'local') out.push(...await compose())
console.log(`\n${command}\n${new Date().toISOString()}, commit ${gitCommit()}, ${machine()}; latency from each request's scheduled send, open loop\n`)
console.log(out.join('\n'))
