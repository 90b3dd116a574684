// `npm run bench:compare` — BULKHEAD-PAY-001's comparison table, measured on
// this machine with the fleet's own code in three topologies:
//
//   A  one process, one shared pg pool of 60, one admission limit of 500 in flight
//   B  one process, per-lane admission bulkheads, one shared pg pool of 60
//   C  the fleet (npm start): a process, a pool and a role per lane
//
// Every topology gets the same load and the same brownout: open-loop card
// authorizations and tax quotes through the gateway code; after a warm-up and a
// baseline the tax sandbox answers in 8,000 ms, and the tax quote deadline is the
// spec's 10 s socket timeout (MC-ST-01), so the slow calls are held as in
// INC-4491. One PostgreSQL server (embedded) serves all three; it, the sandbox and
// the system under test are pinned to cpu 0, the load generator to cpu 1.
//
// Prints, per topology, card-auth p50/p99/max during the fault, the error rate
// (card authorizations not answered 201, client timeout 5 s), the peak RSS of the
// system's Node processes and the event-loop delay of the process serving
// card-auth; writes the table to docs/bench-compare.md and the raw figures to
// test-artifacts/bench-compare.json.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { Pool, errors } from 'undici'
import { loadCardToken, seedLoadCards } from '../../../services/card-auth/seed.ts'
import { waitHealthy } from '../../../services/supervisor/child.ts'
import { bootstrapDatabase, localSecrets } from '../../../shared/db/bootstrap.ts'
import { newHistogram, runOpenLoop, summary } from '../open-loop.ts'
import { hasTaskset, pinSelf, startLocalFleet } from '../local-fleet.ts'
import { gatewayPost, gitCommit, machine as machineLine, numberFlag, sleep } from '../run-info.ts'

const { values: a } = parseArgs({
  options: {
    'card-rate': { type: 'string', default: '100' },
    'tax-rate': { type: 'string', default: '75' },
    'warmup-seconds': { type: 'string', default: '20' },
    'baseline-seconds': { type: 'string', default: '10' },
    'fault-seconds': { type: 'string', default: '30' },
    'fault-latency-ms': { type: 'string', default: '8000' },
    'tax-deadline-ms': { type: 'string', default: '10000' },
    'client-timeout-ms': { type: 'string', default: '5000' },
    'tax-client-timeout-ms': { type: 'string', default: '12000' },
    topologies: { type: 'string', default: 'C,A,B' },
    'base-port': { type: 'string', default: '18480' },
    doc: { type: 'string', default: 'docs/bench-compare.md' },
  },
})
const N = (k: keyof typeof a): number => numberFlag(a, k)
const P = { cardRate: N('card-rate'), taxRate: N('tax-rate'), warmupS: N('warmup-seconds'), baselineS: N('baseline-seconds'), faultS: N('fault-seconds'), faultLatencyMs: N('fault-latency-ms'), taxDeadlineMs: N('tax-deadline-ms'), clientTimeoutMs: N('client-timeout-ms'), taxClientTimeoutMs: N('tax-client-timeout-ms') }
const topologies = a.topologies!.split(',').map(s => s.trim().toUpperCase()) as Array<'A' | 'B' | 'C'>
if (!topologies.every(t => ['A', 'B', 'C'].includes(t))) { console.error('--topologies: A, B and/or C'); process.exit(2) }
const argv = process.argv.slice(2).join(' ')
const command = `npm run bench:compare${argv ? ' -- ' + argv : ''}`
const root = path.resolve(import.meta.dirname, '../../..')
const base = N('base-port')
const dataDir = path.resolve(root, '.data/bench-compare')
const SERVER_CPU = '0'

const DESCRIBE = {
  A: 'one process, one shared pool of 60, one admission limit of 500 in flight (deep queue behind it)',
  B: 'one process, per-lane admission bulkheads (75/30/15), one shared pool of 60',
  C: 'the fleet: gateway, each lane, workers and deck in their own processes, a pool and a DB role per lane',
}

/** RSS (bytes) of a process, from /proc; 0 when it is gone. */
function rssOf (pid: number): number {
  try { return Number(/VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024 } catch { return 0 }
}
function childrenOf (pid: number): number[] {
  const r = spawnSync('pgrep', ['-P', String(pid)], { encoding: 'utf8' })
  return r.stdout.split('\n').filter(Boolean).map(Number)
}
const cmdline = (pid: number): string => { try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ') } catch { return '' } }

function metric (text: string, name: string): number | null {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm').exec(text)
  return m ? Number(m[1]) : null
}

interface System { gatewayUrl: string, cardAuthUrl: string, pids (): number[], stop (): Promise<void> }

function startSandbox (): Promise<{ url: string, stop (): Promise<void> }> {
  const port = base + 50
  const [cmd, args] = hasTaskset() ? ['taskset', ['-c', SERVER_CPU, process.execPath, '--import', 'tsx', 'services/tax-sandbox/main.ts']] : [process.execPath, ['--import', 'tsx', 'services/tax-sandbox/main.ts']]
  const child = spawn(cmd as string, args as string[], { cwd: root, env: { ...process.env, TAX_SANDBOX_PORT: String(port), LOG_LEVEL: 'warn' }, stdio: ['ignore', 'ignore', 'inherit'] })
  const url = `http://127.0.0.1:${port}`
  return (async () => {
    await waitHealthy(`${url}/health/live`, 20_000)
    return { url, stop: () => stopChild(child) }
  })()
}

function stopChild (child: ChildProcess): Promise<void> {
  return new Promise(resolve => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    const kill = setTimeout(() => child.kill('SIGKILL'), 15_000)
    child.once('exit', () => { clearTimeout(kill); resolve() })
    child.kill('SIGTERM')
  })
}

async function startMonolith (topology: 'A' | 'B', databaseUrl: string, sandboxUrl: string): Promise<System> {
  const args = ['--import', 'tsx', 'test/load/compare/monolith.ts']
  const [cmd, argv_] = hasTaskset() ? ['taskset', ['-c', SERVER_CPU, process.execPath, ...args]] : [process.execPath, args]
  const child = spawn(cmd as string, argv_ as string[], {
    cwd: root, stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, TOPOLOGY: topology, DATABASE_URL: databaseUrl, DATA_DIR: dataDir, GATEWAY_PORT: String(base + 40), TAX_PROVIDER_URL: sandboxUrl, TAX_QUOTE_DEADLINE_MS: String(P.taxDeadlineMs), LOG_LEVEL: 'error' },
  })
  const up = await new Promise<{ gatewayUrl: string, laneUrls: Record<string, string> }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('monolith did not start')), 60_000)
    readline.createInterface({ input: child.stdout! }).on('line', l => { try { const j = JSON.parse(l); if (j.up) { clearTimeout(timer); resolve(j) } } catch { /* a log line */ } })
    child.once('exit', code => { clearTimeout(timer); reject(new Error(`monolith exited ${code}`)) })
  })
  // The process itself: `taskset` execs node, so the child's pid is the monolith's.
  return { gatewayUrl: up.gatewayUrl, cardAuthUrl: up.laneUrls['card-auth']!, pids: () => [child.pid!], stop: () => stopChild(child) }
}

async function startFleet (databaseUrl: string): Promise<System & { apiKey: string, sandboxUrl: string }> {
  const fleet = await startLocalFleet({
    dataDir, basePort: base, cpus: SERVER_CPU,
    env: { DATABASE_URL: databaseUrl, TAX_QUOTE_DEADLINE_MS: String(P.taxDeadlineMs), DECK_POLL_MS: '1000' },
  })
  const sup = fleet.pid
  return {
    gatewayUrl: fleet.gatewayUrl, cardAuthUrl: fleet.laneUrls['card-auth'], apiKey: fleet.apiKey, sandboxUrl: fleet.sandboxUrl,
    // The fleet's own processes; the sandbox stands for the third party, PostgreSQL is shared by all topologies.
    pids: () => [sup, ...childrenOf(sup).filter(p => cmdline(p).includes('node') && !cmdline(p).includes('tax-sandbox'))],
    stop: fleet.stop,
  }
}

interface Result {
  topology: 'A' | 'B' | 'C'
  describe: string
  card: { p50Ms: number, p99Ms: number, maxMs: number, count: number, answers: Record<string, number>, errorRate: number, sentRate: number }
  baselineCardP99Ms: number
  tax: Record<string, number>
  peakRssMb: number
  processes: number
  eventLoop: { p99Ms: number | null, maxMs: number | null }
}

async function measure (topology: 'A' | 'B' | 'C', sys: System, apiKey: string, setLatency: (ms: number) => Promise<void>): Promise<Result> {
  const cardPool = new Pool(sys.gatewayUrl, { connections: Math.ceil(P.cardRate * P.clientTimeoutMs / 1000) + 32, headersTimeout: P.clientTimeoutMs, bodyTimeout: P.clientTimeoutMs })
  const taxPool = new Pool(sys.gatewayUrl, { connections: Math.ceil(P.taxRate * P.taxClientTimeoutMs / 1000) + 32, headersTimeout: P.taxClientTimeoutMs, bodyTimeout: P.taxClientTimeoutMs })
  const metricsPool = new Pool(sys.cardAuthUrl, { connections: 1 })
  const run = `${topology}-${Date.now().toString(36)}`
  let phase = 'warmup' as 'warmup' | 'baseline' | 'fault'
  const h = { baseline: newHistogram(), fault: newHistogram() }
  const cardAnswers: Record<string, number> = {}
  const taxAnswers: Record<string, number> = {}
  const codes = new Map<number, string>()
  const card = async (i: number): Promise<number> => {
    try {
      const r = await gatewayPost(cardPool, apiKey, '/v1/authorizations', `cmp-${run}-${i}`, { merchantId: 'm_compare', cardToken: loadCardToken(i), amount: { value: 1, currency: 'EUR' } })
      const j = await r.body.json().catch(() => ({})) as { code?: string }
      codes.set(i, r.statusCode === 201 ? '201' : `${r.statusCode} ${j.code ?? ''}`.trim())
      return r.statusCode
    } catch (err) {
      codes.set(i, err instanceof errors.HeadersTimeoutError || err instanceof errors.BodyTimeoutError ? 'client timeout' : `transport: ${(err as Error).message}`)
      throw err
    }
  }
  const tax = async (i: number): Promise<number> => {
    let k: string
    try {
      const r = await gatewayPost(taxPool, apiKey, '/v1/tax/quotes', `cmpt-${run}-${i}`, { jurisdiction: ['US-CA', 'DE', 'FR'][i % 3], amount: { value: 10_000, currency: 'EUR' } })
      const j = await r.body.json().catch(() => ({})) as { code?: string, source?: string }
      k = r.statusCode === 200 ? `200 ${j.source ?? ''}`.trim() : `${r.statusCode} ${j.code ?? ''}`.trim()
      if (phase === 'fault') taxAnswers[k] = (taxAnswers[k] ?? 0) + 1
      return r.statusCode
    } catch (err) {
      k = err instanceof errors.HeadersTimeoutError ? 'client timeout' : 'transport error'
      if (phase === 'fault') taxAnswers[k] = (taxAnswers[k] ?? 0) + 1
      throw err
    }
  }
  let faultFrom = Infinity
  const onCard = (i: number, scheduled: number, us: number): void => {
    const code = codes.get(i) ?? 'unknown'
    codes.delete(i)
    const inFault = scheduled >= faultFrom
    if (inFault) { h.fault.recordValue(us); cardAnswers[code] = (cardAnswers[code] ?? 0) + 1 } else h.baseline.recordValue(us)
  }
  // RSS and event loop sampled through the whole measured run.
  let peakRss = 0; let processes = 0
  const loop = { p99: [] as number[], max: [] as number[] }
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      const pids = sys.pids()
      const rss = pids.reduce((s, p) => s + rssOf(p), 0)
      if (rss > peakRss) { peakRss = rss; processes = pids.length }
      // prom-client resets its event-loop histogram at each scrape: scraping through the
      // baseline too keeps start-up lag out of the first reading of the fault.
      if (phase !== 'warmup') {
        try {
          const inFault = phase === 'fault'
          const r = await metricsPool.request({ method: 'GET', path: '/metrics', signal: AbortSignal.timeout(2_000) })
          const text = await r.body.text()
          const p99 = metric(text, 'nodejs_eventloop_lag_p99_seconds'); const max = metric(text, 'nodejs_eventloop_lag_max_seconds')
          if (inFault && p99 !== null) loop.p99.push(p99 * 1000)
          if (inFault && max !== null) loop.max.push(max * 1000)
        } catch { /* a process too busy to answer in 2 s: its lag shows in the next scrape */ }
      }
      await sleep(1_000)
    }
  })()

  // Warm-up, not recorded: half at a gentle rate (a cold system: JIT, pools), half at the full rates.
  const warmRate = { card: Math.min(P.cardRate, 100), tax: Math.min(P.taxRate, 20) }
  let w = 1e9
  for (const [cr, tr] of [[warmRate.card, warmRate.tax], [P.cardRate, P.taxRate]] as const) {
    await Promise.all([
      runOpenLoop({ rate: cr, durationMs: P.warmupS * 500, send: () => card(w++).catch(() => 0) }),
      runOpenLoop({ rate: tr, durationMs: P.warmupS * 500, send: () => tax(w++).catch(() => 0) }),
    ])
  }
  codes.clear()
  phase = 'baseline'
  const total = P.baselineS + P.faultS
  const started = performance.now()
  const timeline = (async () => {
    await sleep(P.baselineS * 1000)
    await setLatency(P.faultLatencyMs)
    faultFrom = performance.now(); phase = 'fault'
    console.log(`  ${topology}: fault on at ${((faultFrom - started) / 1000).toFixed(1)} s`)
  })()
  const [c] = await Promise.all([
    runOpenLoop({ rate: P.cardRate, durationMs: total * 1000, send: card, onResult: onCard }),
    runOpenLoop({ rate: P.taxRate, durationMs: total * 1000, send: tax }),
    timeline,
  ])
  sampling = false
  await sampler
  await setLatency(0)
  await Promise.allSettled([cardPool.destroy(), taxPool.destroy(), metricsPool.destroy()])
  const s = summary(h.fault)
  const ok = cardAnswers['201'] ?? 0
  const mx = (xs: number[]): number | null => xs.length ? Math.round(Math.max(...xs) * 10) / 10 : null
  return {
    topology, describe: DESCRIBE[topology],
    card: { ...s, answers: cardAnswers, errorRate: s.count ? 1 - ok / s.count : 1, sentRate: c.sentRate },
    baselineCardP99Ms: summary(h.baseline).p99Ms,
    tax: taxAnswers,
    peakRssMb: Math.round(peakRss / 1e5) / 10,
    processes,
    eventLoop: { p99Ms: mx(loop.p99), maxMs: mx(loop.max) },
  }
}

async function main (): Promise<void> {
  fs.mkdirSync(dataDir, { recursive: true })
  // PostgreSQL, shared by all three topologies, on the system's cpu: started while
  // this process is pinned there, so the server inherits that pinning.
  const pinnedServer = pinSelf(SERVER_CPU)
  const secrets = localSecrets(dataDir)
  const db = await bootstrapDatabase({ dataDir, port: base + 49, database: 'watertight', secrets, log: m => console.log(`  ${m}`) })
  const pinned = pinnedServer && pinSelf('1')
  const admin = new pg.Client({ connectionString: db.superUrl })
  await admin.connect()
  await seedLoadCards(admin, 1_000)
  const results: Result[] = []
  try {
    // The fleet first: its supervisor writes the API key and the tax certificate the monolith reuses.
    const order = topologies.includes('C') ? ['C' as const, ...topologies.filter(t => t !== 'C')] : topologies
    let apiKey: string | undefined
    let sandbox: { url: string, stop (): Promise<void> } | undefined
    for (const t of order) {
      console.log(`topology ${t}: ${DESCRIBE[t]}`)
      let sys: System
      let sandboxUrl: string
      if (t === 'C') {
        const f = await startFleet(db.superUrl)
        sys = f; apiKey = f.apiKey; sandboxUrl = f.sandboxUrl
      } else {
        if (!apiKey) apiKey = JSON.parse(fs.readFileSync(path.join(dataDir, 'credentials.json'), 'utf8')).apiKey as string
        sandbox ??= await startSandbox()
        sandboxUrl = sandbox.url
        sys = await startMonolith(t, db.superUrl, sandboxUrl)
      }
      const setLatency = async (ms: number): Promise<void> => {
        const r = await fetch(`${sandboxUrl}/faults`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ latencyMs: ms }) })
        if (!r.ok) throw new Error(`sandbox faults: ${r.status}`)
      }
      try {
        await setLatency(0)
        const r = await measure(t, sys, apiKey!, setLatency)
        results.push(r)
        console.log(`  ${t}: card p99 ${r.card.p99Ms.toFixed(1)} ms, errors ${(r.card.errorRate * 100).toFixed(1)}%, peak RSS ${r.peakRssMb} MB, loop max ${r.eventLoop.maxMs} ms`)
      } finally {
        await sys.stop()
      }
      await sleep(3_000)
    }
    await sandbox?.stop()
  } finally {
    await admin.end()
    await db.embedded?.stop()
  }

  const commit = gitCommit(root)
  const date = new Date().toISOString()
  const machine = machineLine({ kernel: true })
  const placement = pinned ? 'system under test, the sandbox and PostgreSQL pinned to cpu 0; load generator to cpu 1' : 'not pinned (no taskset)'
  const fmt = (x: number): string => x >= 100 ? x.toFixed(0) : x.toFixed(1)
  const sorted = ['A', 'B', 'C'].flatMap(t => results.filter(r => r.topology === t))
  const table = [
    '| topology | card-auth p50 / p99 / max during the fault (ms) | card-auth error rate | card answers | peak RSS (Node processes) | event-loop delay p99 / max, card-auth\'s process (ms) | tax answers during the fault |',
    '|---|---|---|---|---|---|---|',
    ...sorted.map(r => `| **${r.topology}** ${r.describe} | ${fmt(r.card.p50Ms)} / ${fmt(r.card.p99Ms)} / ${fmt(r.card.maxMs)} | ${(r.card.errorRate * 100).toFixed(1)}% | ${Object.entries(r.card.answers).map(([k, v]) => `${k}: ${v}`).join(', ')} | ${r.peakRssMb} MB (${r.processes}) | ${r.eventLoop.p99Ms ?? '–'} / ${r.eventLoop.maxMs ?? '–'} | ${Object.entries(r.tax).map(([k, v]) => `${k}: ${v}`).join(', ')} |`),
  ].join('\n')
  const doc = `# Bulkhead comparison, measured (npm run bench:compare)

Generated by \`${command}\` on ${date}, commit \`${commit}\`.
Machine: ${machine}; ${placement}.

Load, the same for every topology: ${P.cardRate} card authorizations/s and ${P.taxRate} tax quotes/s, open loop
through the gateway's code (latency from each request's scheduled send time, HDR histograms; card client timeout
${P.clientTimeoutMs} ms, counted as an error; the checkout waits up to ${P.taxClientTimeoutMs} ms for tax, as in INC-4491, since a client that
gives up sooner frees the lane's permit). ${P.warmupS} s warm-up, not recorded (half at up to 100 card and 20 tax req/s, half at the full rates), ${P.baselineS} s baseline, then ${P.faultS} s with the tax
sandbox answering in ${P.faultLatencyMs} ms and the tax quote deadline at ${P.taxDeadlineMs} ms (the spec's socket timeout, so
slow calls are held as in INC-4491; the fleet's default deadline is 2,000 ms). One PostgreSQL server for all.
The error rate is the share of card authorizations scheduled during the fault not answered 201.
RSS is the sum over the system's Node processes (the sandbox, which stands for the third party, and
PostgreSQL are not counted); for C that is the supervisor, gateway, three lanes, two workers and the deck.

${table}

Baseline card-auth p99 before the fault: ${sorted.map(r => `${r.topology} ${fmt(r.baselineCardP99Ms)} ms`).join(', ')}.
`
  const docPath = path.resolve(root, a.doc!)
  fs.mkdirSync(path.dirname(docPath), { recursive: true })
  fs.writeFileSync(docPath, doc)
  fs.mkdirSync(path.join(root, 'test-artifacts'), { recursive: true })
  fs.writeFileSync(path.join(root, 'test-artifacts/bench-compare.json'), JSON.stringify({ command, date, commit, machine, placement, params: P, results }, null, 2))
  console.log('\n' + doc)
  console.log(`written: ${path.relative(root, docPath)}, test-artifacts/bench-compare.json`)
}

await main()
