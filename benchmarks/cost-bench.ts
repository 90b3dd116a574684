// `npm run bench -- cost`: what one card authorization costs in CPU, process by
// process. Starts the fleet (npm start's supervisor, its own data directory and
// ports), drives POST /v1/authorizations through the gateway open loop at each
// given rate, and reads every fleet process's CPU (and every PostgreSQL backend's,
// by the role it connects as) from /proc before and after each run. Prints CPU µs
// per authorization for each, the end-to-end figure the issue's budget is about
// (gateway + card-auth + its card_auth_ds backends), latency and answers.
// At a low rate a process's fixed per-wakeup cost dominates: read it at the rate
// you care about.
//
// --redis: the retry guard's counters in Redis (REDIS_URL) against in memory,
// in one run: a redis-server and a second gateway on it beside the fleet's, and
// each rate's load alternated between the two gateways --rounds times. Its end
// to end adds that gateway's Redis: gateway+redis + redis-server + card-auth +
// pg:card_auth_ds. After the runs, on the same redis-server, the floor
// (benchmarks/redis-floor.ts): one bare round trip per request at the first
// rate, and the store alone outside the gateway.
//
// --tracing: the cost of tracing (shared/tracing.ts), in one run: more
// gateway and card-auth pairs beside the fleet's own, started alike with the
// environment of the fleet's own (its role, its settings, its CPU priority),
// each pointed at an OTLP sink of its own, one per --ratios entry: off, a
// sampling ratio, or base (--baseline: another checkout's build, the code
// before tracing). Each rate's load is alternated between them --rounds
// times, each round starting one further on (the fleet's own pair stays idle:
// started by the supervisor, it would not be alike). The sinks' CPU is
// reported, not counted: the collector is not the fleet's.
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import pg from 'pg'
import { Pool } from 'undici'
import { loadCardToken, seedLoadCards } from '../services/card-auth/seed.ts'
import { fillAuthorizations } from './card-table.ts'
import { runOpenLoop, summary } from './open-loop.ts'
import { hasTaskset, pinSelf, startLocalFleet } from './local-fleet.ts'
import { cpuByPid, cpuDeltaByLabel, cpuUs, fleetProcesses } from './proc-cpu.ts'
import { gatewayPost, gitCommit, machine, numberFlag, parseFlags, sleep } from './run-info.ts'

const { values: a } = parseFlags({
  options: {
    rates: { type: 'string', default: '200,700,1400' },
    seconds: { type: 'string', default: '15' },
    'fleet-cpus': { type: 'string' },
    'generator-cpus': { type: 'string' },
    'base-port': { type: 'string', default: '18480' },
    rows: { type: 'string', default: '200000' },
    redis: { type: 'boolean', default: false },
    tracing: { type: 'boolean', default: false },
    rounds: { type: 'string', default: '2' },
    // --tracing's pairs: off (the SDK never loaded), a sampling ratio (0: the
    // SDK on, sampling nothing), or base (--baseline's build). Two alike
    // (off,off,0.01) read how far two pairs started alike differ with nothing
    // else changed.
    ratios: { type: 'string', default: 'off,0.01,1' },
    // Another build of the fleet for the `base` pair, tracing off: a checkout's
    // directory with its dist/ built (off against the code before tracing).
    baseline: { type: 'string' },
    // --tracing's pairs under --cpu-prof, their profiles written here when they stop.
    'cpu-prof-dir': { type: 'string' },
    // Seconds of the same load before each measured run, not counted. An
    // alternated target sits idle while the others run, and its first seconds
    // back under load cost more than its steady state (more so the longer it
    // sat): the lead-in's own figure is printed on each round's line.
    'lead-in': { type: 'string', default: '0' },
    // --tracing: every round starts each pair anew (and warms it up). Two
    // processes started alike can differ by several percent in CPU per request
    // for as long as they run, so one process per pair measures that process as
    // much as what it traces; a new one per round samples it.
    fresh: { type: 'boolean', default: false },
  }
})
const rates = a.rates!.split(',').map(Number)
const seconds = numberFlag(a, 'seconds', 1, 3_600)
const rounds = numberFlag(a, 'rounds', 1, 20)
const leadIn = numberFlag(a, 'lead-in', 0, 600)
if (a.redis && a.tracing) { console.error('cost: --redis or --tracing, not both'); process.exit(2) }
const alternated = a.redis || a.tracing
const ratios = a.ratios!.split(',').map(r => r === 'off' || r === 'base' ? r as 'off' | 'base' : Number(r))
if (a.tracing && (ratios.length < 2 || ratios.some(r => typeof r === 'number' && !(r >= 0 && r <= 1)))) { console.error('cost: --ratios takes two or more of off, base or a sampling ratio from 0 to 1, comma-separated'); process.exit(2) }
if (a.fresh && !a.tracing) { console.error('cost: --fresh goes with --tracing'); process.exit(2) }
if (ratios.includes('base') !== (a.baseline !== undefined)) { console.error('cost: --ratios base and --baseline <checkout> go together'); process.exit(2) }
if (a.baseline && !fs.existsSync(path.join(a.baseline, 'dist/services/main.js'))) { console.error(`cost: --baseline ${a.baseline}: no dist/services/main.js there (build that checkout first)`); process.exit(2) }
const command = `npm run bench -- cost --rates ${a.rates} --seconds ${seconds}${a.redis ? ` --redis --rounds ${rounds}` : ''}${a.tracing ? ` --tracing --rounds ${rounds}${a.ratios !== 'off,0.01,1' ? ` --ratios ${a.ratios}` : ''}${a.baseline ? ` --baseline ${a.baseline}` : ''}${a['cpu-prof-dir'] ? ` --cpu-prof-dir ${a['cpu-prof-dir']}` : ''}` : ''}${a.rows !== '200000' ? ` --rows ${a.rows}` : ''}${a['fleet-cpus'] ? ` --fleet-cpus ${a['fleet-cpus']}` : ''}${a['generator-cpus'] ? ` --generator-cpus ${a['generator-cpus']}` : ''}${leadIn ? ` --lead-in ${leadIn}` : ''}${a.fresh ? ' --fresh' : ''}`
const LANE_SIDE = ['card-auth', 'pg:card_auth_ds']

// An OTLP/HTTP sink: answers every export at once and counts the spans in it.
const SINK = `
const http = require('node:http')
let spans = 0
http.createServer((req, res) => {
  if (req.method === 'GET') { res.end(String(spans)); return }
  const chunks = []
  req.on('data', c => chunks.push(c))
  req.on('end', () => {
    try {
      for (const rs of JSON.parse(Buffer.concat(chunks)).resourceSpans ?? []) {
        for (const ss of rs.scopeSpans ?? []) spans += (ss.spans ?? []).length
      }
    } catch {}
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  })
}).listen(Number(process.argv[1]), '127.0.0.1')`

/** A process's environment, but the IPC channel its parent gave it. */
function environOf (pid: number): Record<string, string> {
  const pairs = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').filter(Boolean).map(kv => {
    const i = kv.indexOf('=')
    return [kv.slice(0, i), kv.slice(i + 1)] as const
  })
  return Object.fromEntries(pairs.filter(([k]) => !k.startsWith('NODE_CHANNEL_')))
}

/** The server's WAL so far (pg_stat_wal): bytes, and full-page images among them. */
async function walNow (db: pg.Client): Promise<{ bytes: number, fpi: number, commits: number }> {
  // Commits from the backends' reported statistics, which a busy backend sends at most once a second.
  const { rows: [w] } = await db.query<{ bytes: string, fpi: string, commits: string }>('select wal_bytes as bytes, wal_fpi as fpi, (select xact_commit from pg_stat_database where datname = current_database()) as commits from pg_stat_wal')
  return { bytes: Number(w!.bytes), fpi: Number(w!.fpi), commits: Number(w!.commits) }
}

const basePort = numberFlag(a, 'base-port', 1_024, 60_000)
const dataDir = '.data/bench-cost'
const fleet = await startLocalFleet({ dataDir, basePort, cpus: a['fleet-cpus'], env: { LOG_LEVEL: 'warn' } })
if (a['generator-cpus'] && hasTaskset()) pinSelf(a['generator-cpus'])
const execFileP = promisify(execFile)
const extra: ChildProcess[] = []
/** The --redis run's redis-server, for the floor measured after the runs. */
let redisServer: { port: number, pid: number } | undefined

/** benchmarks/redis-floor.ts on `server`: µs per call of the bare round trip and of the store alone. */
async function redisFloor (
  server: { port: number, pid: number }, rate: number, seconds: number
): Promise<{ bare: { client: number, server: number }, store: { client: number, server: number } }> {
  const { stdout } = await execFileP(process.execPath, ['--import', 'tsx', path.resolve('benchmarks/redis-floor.ts'), String(server.port), String(server.pid), String(rate), String(seconds)])
  return JSON.parse(stdout.trim().split('\n').at(-1)!)
}
// Nothing left running if this process ends another way.
process.once('exit', () => { for (const p of extra) p.kill('SIGKILL') })
try {
  const db = new pg.Client({ connectionString: fleet.databaseUrl })
  // The fleet stopping (a failure below) ends this connection: the failure is what to report.
  db.on('error', () => {})
  await db.connect()
  await seedLoadCards(db, 1_000)
  // The planner's statistics as a running fleet's autovacuum keeps them. A bench's
  // fleet lives about a minute, less than autovacuum's first look at the database
  // (autovacuum_naptime, 60 s), so without this the lane's statements are planned
  // for tables never analyzed: a bitmap scan for a unique key's one row. And a
  // table of some size first: analyzed empty is worse (card-table.ts).
  await fillAuthorizations(db, numberFlag(a, 'rows', 0, 50_000_000))
  // The bench's data directory keeps what earlier runs wrote: say how big the table is.
  const table = (await db.query<{ n: string, size: string, buffers: string }>("select reltuples::bigint as n, pg_size_pretty(pg_total_relation_size('card_auth.authorizations')) as size, current_setting('shared_buffers') as buffers from pg_class where oid = 'card_auth.authorizations'::regclass")).rows[0]!
  const tableNote = `card_auth.authorizations ${Number(table.n).toLocaleString('en')} rows (${table.size} with indexes) at the start, shared_buffers ${table.buffers}`
  console.log(tableNote)

  interface Target {
    name: string
    url: string
    gateway: string
    extra: string[]
    /** The card-auth process and its backends. */
    lane: string[]
    pool: Pool
    /** Spans its sink has received so far (a traced target). */
    spans?: () => Promise<number>
    /** Stops its own processes (a traced pair), for --fresh. */
    stop?: () => Promise<void>
  }
  const targets: Target[] = [{
    name: 'memory',
    url: fleet.gatewayUrl,
    gateway: 'gateway',
    extra: [],
    lane: LANE_SIDE,
    pool: new Pool(fleet.gatewayUrl, { connections: 256 }),
  }]
  const names: Record<number, string> = {}
  if (a.redis) {
    const redisPort = basePort + 20
    const redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning'], { stdio: 'ignore' })
    redisServer = { port: redisPort, pid: redis.pid! }
    extra.push(redis)
    names[redis.pid!] = 'redis-server'
    const url = `http://127.0.0.1:${basePort + 21}`
    // The fleet's gateway as npm start runs it, on the fleet's lanes and keys, with REDIS_URL.
    const gw = spawn(process.execPath, [path.resolve('dist/services/main.js'), 'gateway'], {
      stdio: 'ignore',
      env: {
        ...process.env,
        LOG_LEVEL: 'warn',
        GATEWAY_PORT: String(basePort + 21),
        GATEWAY_HOST: '127.0.0.1',
        API_KEYS_FILE: path.join(dataDir, 'api-keys.json'),
        CARD_AUTH_URL: fleet.laneUrls['card-auth'],
        FRAUD_URL: fleet.laneUrls.fraud,
        TAX_URL: fleet.laneUrls.tax,
        REDIS_URL: `redis://127.0.0.1:${redisPort}`,
        GATEWAY_REPLICAS: '2',
      },
    })
    extra.push(gw)
    names[gw.pid!] = 'gateway+redis'
    for (let i = 0; i < 300; i++) {
      const up = await fetch(`${url}/health/ready`).then(r => r.ok, () => false)
      const shared = up && /gateway_retry_guard_store_up\{[^}]*\} 1/.test(await (await fetch(`${url}/metrics`)).text())
      if (shared) break
      if (i === 299) throw new Error('the gateway on Redis did not turn ready with its store up')
      await sleep(100)
    }
    targets.push({ name: 'redis', url, gateway: 'gateway+redis', extra: ['redis-server'], lane: LANE_SIDE, pool: new Pool(url, { connections: 256 }) })
  }
  /**
   * A gateway and a card-auth that trace at `ratio`, exporting to a sink of their
   * own: each started with the environment of the fleet's own (the supervisor
   * gave it: role, settings) and its CPU priority, on ports of their own.
   */
  async function tracedPipeline (
    o: {
      name: string, ratio: number | 'off' | 'base', basePort: number, gatewayPid: number, cardAuthPid: number, checkout?: string
    }
  ): Promise<Target> {
    const sinkPort = o.basePort
    const sink = spawn(process.execPath, ['-e', SINK, String(sinkPort)], { stdio: 'ignore' })
    const mine: ChildProcess[] = [sink]
    extra.push(sink)
    names[sink.pid!] = `otlp-sink ${o.name}`
    const otel = {
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${sinkPort}`,
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: String(typeof o.ratio === 'number' ? o.ratio : 0),
      // Room for a second of every span at 1,400/s: a full queue drops spans, which would read as cheap.
      OTEL_BSP_MAX_QUEUE_SIZE: '65536',
      OTEL_BSP_SCHEDULE_DELAY: '1000',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4096',
      // Every run starts from a process as warm as load leaves it: one that sat
      // out a run idles past IDLE_TRIM_SECONDS and gives its young generation
      // back, and the next 15 s at 1,400/s read ~70 µs an authorization dearer
      // than a run straight after its last one, whatever it traces.
      IDLE_TRIM_SECONDS: '0',
      // Off: the same processes and settings, the SDK never loaded.
      ...(typeof o.ratio === 'number' ? {} : { OTEL_SDK_DISABLED: 'true' }),
    }
    const like = (pid: number, label: string, env: Record<string, string>): ChildProcess => {
      const [, ...own] = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean)
      const dist = path.resolve('dist') + path.sep
      const args = o.checkout ? own.map(x => x.startsWith(dist) ? path.join(path.resolve(o.checkout!), 'dist', x.slice(dist.length)) : x) : own
      const prof = a['cpu-prof-dir'] ? ['--cpu-prof', '--cpu-prof-dir', a['cpu-prof-dir']] : []
      const p = spawn(process.execPath, [...prof, ...args], { stdio: 'ignore', env: { ...environOf(pid), LOG_LEVEL: 'warn', ...otel, ...env } })
      // A profile's file is named by its pid.
      if (prof.length) console.log(`${label}: pid ${p.pid}`)
      extra.push(p)
      mine.push(p)
      names[p.pid!] = label
      os.setPriority(p.pid!, os.getPriority(pid))
      return p
    }
    const cardPort = o.basePort + 1
    like(o.cardAuthPid, `card-auth ${o.name}`, { CARD_AUTH_PORT: String(cardPort) })
    const url = `http://127.0.0.1:${o.basePort + 2}`
    like(o.gatewayPid, `gateway ${o.name}`, { GATEWAY_PORT: String(o.basePort + 2), CARD_AUTH_URL: `http://127.0.0.1:${cardPort}` })
    for (let i = 0; ; i++) {
      if (await fetch(`${url}/health/ready`).then(r => r.ok, () => false)) break
      if (i === 600) throw new Error(`the gateway tracing ${o.name} did not turn ready`)
      await sleep(100)
    }
    return {
      name: typeof o.ratio === 'number' ? `trace ${o.name}` : `tracing ${o.name}`,
      url,
      gateway: `gateway ${o.name}`,
      extra: [],
      lane: [`card-auth ${o.name}`, 'pg:card_auth_ds'],
      pool: new Pool(url, { connections: 256 }),
      spans: async () => Number(await (await fetch(`http://127.0.0.1:${sinkPort}/`)).text()),
      // Gateway first, then card-auth (its pool and heartbeat released), then the sink; each waited for.
      stop: async () => {
        for (const p of [...mine].reverse()) {
          if (p.exitCode === null && p.signalCode === null) {
            const gone = new Promise(resolve => p.once('exit', resolve))
            p.kill('SIGTERM')
            await gone
          }
          const at = extra.indexOf(p)
          if (at >= 0) extra.splice(at, 1)
          delete names[p.pid!]
        }
      },
    }
  }
  const pairs: Array<Parameters<typeof tracedPipeline>[0]> = []
  if (a.tracing) {
    const own = await fleetProcesses(fleet.pid, db)
    const pidOf = (label: string): number => [...own].find(([, l]) => l === label)![0]
    for (const [k, ratio] of ratios.entries()) {
      // A second pair at the same ratio gets a letter: 'off', 'off b'.
      const base = typeof ratio === 'number' ? `${+(ratio * 100).toFixed(2)}%` : ratio
      const twin = ratios.slice(0, k).filter(r => r === ratio).length
      const name = twin ? `${base} ${String.fromCharCode(97 + twin)}` : base
      const pair = { name, ratio, basePort: basePort + 30 + 4 * k, gatewayPid: pidOf('gateway'), cardAuthPid: pidOf('card-auth') }
      pairs.push(ratio === 'base' ? { ...pair, checkout: a.baseline! } : pair)
      targets.push(await tracedPipeline(pairs.at(-1)!))
    }
    await targets.shift()!.pool.close()
  }
  // How many requests the gateway on Redis decided alone (its store out or over budget): a
  // figure for the shared store only means something when these are few.
  const decidedAlone = async (t: Target): Promise<number> => {
    if (t.name !== 'redis') return 0
    const m = /^gateway_retry_guard_local_decisions_total(?:\{[^}]*\})? (\d+)/m.exec(await (await fetch(`${t.url}/metrics`)).text())
    return Number(m?.[1] ?? 0)
  }
  const endToEnd = (t: Target): string[] => [t.gateway, ...t.extra, ...t.lane]
  /** End-to-end CPU µs per authorization from CPU by label over `served` answers. */
  const e2ePer = (t: Target, cpu: Map<string, number>, served: number): number =>
    endToEnd(t).reduce((x, l) => x + (cpu.get(l) ?? 0), 0) / served
  /** One run's end-to-end CPU µs per authorization. */
  const e2eOfRun = (t: Target, r: Run): number => e2ePer(t, r.cpu, r.served)
  let n = 0
  const sender = (t: Target) => async (): Promise<number> => {
    const i = ++n
    const r = await gatewayPost(t.pool, fleet.apiKey, '/v1/authorizations', `cost-${process.pid}-${i}`, {
      merchantId: 'm_cost',
      cardToken: loadCardToken(i),
      amount: { value: 1, currency: 'EUR' },
    })
    await r.body.dump()
    return r.statusCode
  }
  // warm-up (JIT, pools)
  const warmUp = (t: Target) => runOpenLoop({ rate: Math.min(...rates), durationMs: 3_000, send: sender(t) })
  for (const t of targets) await warmUp(t)
  /** --fresh: each pair stopped and started again, then warmed up. Columns find a pair by its labels, which stay. */
  const restartPairs = async (): Promise<void> => {
    for (const t of targets) { await t.pool.close(); await t.stop!() }
    for (const [k, pair] of pairs.entries()) targets[k] = await tracedPipeline(pair)
    for (const t of targets) await warmUp(t)
  }

  interface Run {
    alone: number
    served: number
    scheduled: number
    ok: number
    sentRate: number
    cpu: Map<string, number>
    sys: Map<string, number>
    generator: number
    walBytes: number
    walFpi: number
    commits: number
    p50: number
    p99: number
    spans: number
  }
  const runs = new Map<string, Run[]>()
  const columns: Array<{ key: string, rate: number, target: Target }> = []
  for (const rate of rates) {
    for (const t of targets) {
      columns.push({ key: targets.length > 1 ? `${rate}/s ${t.name}` : `${rate}/s`, rate, target: t })
    }
  }
  for (const rate of rates) {
    for (let round = 0; round < (alternated ? rounds : 1); round++) {
      if (a.fresh && (round > 0 || rate !== rates[0])) await restartPairs()
      // Each round starts one target further on: none always runs first, or always after the same one.
      for (const t of [...targets.slice(round % targets.length), ...targets.slice(0, round % targets.length)]) {
        await sleep(2_000)
        const procs = await fleetProcesses(fleet.pid, db, names)
        for (const [pid, label] of Object.entries(names)) procs.set(Number(pid), label)
        let lead = ''
        if (leadIn) {
          const cpu0 = cpuByPid(procs)
          const l = await runOpenLoop({ rate, durationMs: leadIn * 1000, send: sender(t) })
          lead = `, lead-in ${e2ePer(t, cpuDeltaByLabel(procs, cpu0, cpuByPid(procs)), l.completed).toFixed(0)} µs/auth (not counted)`
        }
        const before = cpuByPid(procs)
        const sys0 = cpuByPid(procs, 'system')
        const gen0 = cpuUs(process.pid)!
        const wal0 = await walNow(db)
        const alone0 = await decidedAlone(t)
        const spans0 = await t.spans?.() ?? 0
        const r = await runOpenLoop({ rate, durationMs: seconds * 1000, send: sender(t) })
        const alone = (await decidedAlone(t)) - alone0
        const after = cpuByPid(procs)
        const sys1 = cpuByPid(procs, 'system')
        const gen1 = cpuUs(process.pid)!
        await sleep(1_500) // the backends' statistics of the run's last second (and the last spans' export)
        const wal1 = await walNow(db)
        const spans = (await t.spans?.() ?? 0) - spans0
        const s = summary(r.histogram)
        const run: Run = {
          alone,
          served: r.completed,
          scheduled: r.scheduled,
          ok: r.statuses['201'] ?? 0,
          sentRate: r.sentRate,
          cpu: cpuDeltaByLabel(procs, before, after),
          sys: cpuDeltaByLabel(procs, sys0, sys1),
          generator: gen1 - gen0,
          walBytes: wal1.bytes - wal0.bytes,
          walFpi: wal1.fpi - wal0.fpi,
          commits: wal1.commits - wal0.commits,
          p50: s.p50Ms,
          p99: s.p99Ms,
          spans,
        }
        const key = targets.length > 1 ? `${rate}/s ${t.name}` : `${rate}/s`
        runs.set(key, [...(runs.get(key) ?? []), run])
        const e2e = e2eOfRun(t, run)
        console.log(`rate ${rate}${targets.length > 1 ? `, ${t.name}, round ${round + 1}` : ''}: sent ${r.sentRate.toFixed(0)}/s, 201 ${(100 * run.ok / r.scheduled).toFixed(1)}%, p50 ${s.p50Ms.toFixed(1)} ms, p99 ${s.p99Ms.toFixed(1)} ms, end to end ${e2e.toFixed(0)} µs/auth${lead}${t.name === 'redis' ? `, decided without Redis ${alone} of ${r.completed}` : ''}`)
      }
    }
  }
  for (const t of targets) await t.pool.close()
  await db.end()
  // The same trip to Redis with nothing of the gateway around it, in this sitting (benchmarks/redis-floor.ts).
  const floor = redisServer && await redisFloor(redisServer, rates[0]!, Math.min(seconds, 10))

  // Each column: its rounds summed, then per answer.
  const per = (key: string, f: (r: Run) => number): number => {
    const rs = runs.get(key)!
    return rs.reduce((x, r) => x + f(r), 0) / rs.reduce((x, r) => x + r.served, 0)
  }
  const cpuOf = (key: string, label: string, part: 'cpu' | 'sys' = 'cpu'): number | undefined =>
    runs.get(key)!.some(r => r[part].has(label)) ? per(key, r => r[part].get(label) ?? 0) : undefined
  const e2eOf = (c: typeof columns[number]): number =>
    endToEnd(c.target).reduce((x, l) => x + (cpuOf(c.key, l) ?? 0), 0)
  const last = columns.at(-1)!
  const labels = [...new Set([...runs.values()].flat().flatMap(r => [...r.cpu.keys()]))]
    .sort((x, y) => (cpuOf(last.key, y) ?? 0) - (cpuOf(last.key, x) ?? 0))
  const cell = (v: number | undefined): string => v === undefined ? '—' : v.toFixed(0)
  const mean = (key: string, f: (r: Run) => number): number => {
    const rs = runs.get(key)!
    return rs.reduce((x, r) => x + f(r), 0) / rs.length
  }
  console.log(`\n${command}`)
  console.log(`${new Date().toISOString()}, commit ${gitCommit()}, ${machine({ kernel: true })}; fleet cpus ${fleet.pinned ?? 'all'}, generator cpus ${a['generator-cpus'] ?? 'all'}`)
  const alternation = alternated ? `; ${targets.map(t => t.name).join(', ')} alternated, ${rounds} rounds of ${seconds} s each${leadIn ? ` (each after ${leadIn} s of the same load, not counted)` : ''}${a.fresh ? ', every pair started anew and warmed up for each round' : ''}, summed` : ''
  console.log(`POST /v1/authorizations through the gateway, open loop; CPU from /proc/<pid>/stat (utime+stime) over each run, divided by the answers${alternation}; ${tableNote}.\n`)
  console.log(`| CPU µs per authorization | ${columns.map(c => c.key).join(' | ')} |`)
  console.log(`|---|${columns.map(() => '---:').join('|')}|`)
  console.log(`| **end to end: ${a.redis ? 'gateway (+ redis-server) ' : 'gateway '}+ card-auth + pg:card_auth_ds${a.tracing ? ' (each target\'s own)' : ''}** | ${columns.map(c => `**${e2eOf(c).toFixed(0)}**`).join(' | ')} |`)
  if (alternated) {
    // The columns keep the targets as they first started (--fresh replaces them; their labels stay).
    const base = columns[0]!.target
    type Column = typeof columns[number]
    const baseOf = (c: Column): Column => columns.find(m => m.rate === c.rate && m.target === base)!
    const ratio = (c: Column): string => c.target === base
      ? '1'
      : `**${(e2eOf(c) / e2eOf(baseOf(c))).toFixed(3)}x**`
    console.log(`| **end to end, against ${base.name}** | ${columns.map(ratio).join(' | ')} |`)
    // Round by round: each round's ratio to the base's run in the same round, minutes
    // apart at most. On a noisy machine a stall in one run moves the summed ratio
    // above; the median of the paired ratios, and their spread, say how far to trust it.
    if (rounds >= 3) {
      const paired = (c: Column): string => {
        if (c.target === base) return '—'
        const own = runs.get(c.key)!
        const theirs = runs.get(baseOf(c).key)!
        const q = own.map((r, i) => e2eOfRun(c.target, r) / e2eOfRun(base, theirs[i]!)).sort((x, y) => x - y)
        const median = q.length % 2 ? q[(q.length - 1) / 2]! : (q[q.length / 2 - 1]! + q[q.length / 2]!) / 2
        const m = q.reduce((x, y) => x + y, 0) / q.length
        const sd = Math.sqrt(q.reduce((x, y) => x + (y - m) ** 2, 0) / (q.length - 1))
        return `${median.toFixed(3)}x (${m.toFixed(3)}x ± ${(sd / Math.sqrt(q.length)).toFixed(3)}, sd ${sd.toFixed(3)})`
      }
      console.log(`| round by round against ${base.name}: the median of the rounds' ratios (their mean ± its standard error, sd) | ${columns.map(paired).join(' | ')} |`)
    }
  }
  if (a.tracing) console.log(`| spans exported per authorization | ${columns.map(c => c.target.spans ? per(c.key, r => r.spans).toFixed(2) : '—').join(' | ')} |`)
  for (const l of labels) console.log(`| ${l} | ${columns.map(c => `${cell(cpuOf(c.key, l))}${endToEnd(c.target).includes(l) ? ` (kernel ${cell(cpuOf(c.key, l, 'sys'))})` : ''}`).join(' | ')} |`)
  console.log(`| whole fleet | ${columns.map(c => per(c.key, r => [...r.cpu.values()].reduce((x, y) => x + y, 0)).toFixed(0)).join(' | ')} |`)
  console.log(`| load generator (this process) | ${columns.map(c => per(c.key, r => r.generator).toFixed(0)).join(' | ')} |`)
  console.log(`| commits per authorization, whole database (1 / the mean group commit) | ${columns.map(c => per(c.key, r => r.commits).toFixed(3)).join(' | ')} |`)
  console.log(`| WAL bytes (full-page images) per authorization, whole server | ${columns.map(c => `${per(c.key, r => r.walBytes).toFixed(0)} (${per(c.key, r => r.walFpi).toFixed(2)})`).join(' | ')} |`)
  if (floor) {
    const memory = columns.find(c => c.rate === rates[0] && c.target.name === 'memory')!
    const row = (what: string, f: { client: number, server: number }): string => {
      const sum = f.client + f.server
      return `| ${what}: client + redis-server, per call (against memory's end to end) | ${columns.map(c => c === columns.find(m => m.target.name === 'redis') ? `${sum.toFixed(0)} = ${f.client.toFixed(0)} + ${f.server.toFixed(0)} (${(100 * sum / e2eOf(memory)).toFixed(1)}%)` : '—').join(' | ')} |`
    }
    console.log(row(`the floor: one round trip, a script that answers at once, bare at ${rates[0]}/s`, floor.bare))
    console.log(row(`the store alone (gateway/guard-store.ts), outside the gateway, at ${rates[0]}/s`, floor.store))
  }
  if (a.redis) console.log(`| decided without Redis (store out or over budget) | ${columns.map(c => c.target.name === 'redis' ? String(runs.get(c.key)!.reduce((x, r) => x + r.alone, 0)) : '—').join(' | ')} |`)
  console.log(`| sent req/s | ${columns.map(c => mean(c.key, r => r.sentRate).toFixed(0)).join(' | ')} |`)
  console.log(`| answered 201 | ${columns.map(c => `${(100 * runs.get(c.key)!.reduce((x, r) => x + r.ok, 0) / runs.get(c.key)!.reduce((x, r) => x + r.scheduled, 0)).toFixed(1)}%`).join(' | ')} |`)
  console.log(`| latency p50 / p99 ms (mean of the rounds) | ${columns.map(c => `${mean(c.key, r => r.p50).toFixed(1)} / ${mean(c.key, r => r.p99).toFixed(1)}`).join(' | ')} |`)
} finally {
  for (const p of extra.reverse()) p.kill('SIGTERM')
  await fleet.stop()
}
