// `npm run drill` — the recovery drill MC-RT-01, run for real.
//
// Open-loop load through the gateway (card authorizations and tax quotes at
// their own fixed rates, latency from each request's scheduled send time) plus
// an INC-4491 client that re-sends the same tax quote every 50 ms without
// backoff. After a baseline, the tax sandbox's latency goes to 8,000 ms for the
// fault window (set through the deck, as an operator would), then back to
// normal. The deck (which polls each lane every 500 ms) is read every 250 ms
// for lane states, active permits and every process's RSS. Afterwards the
// database is asked whether any authorization was lost, doubled or written though refused, and whether any
// role holds orphaned connections. Writes drill.json and drill.html; exits 1
// when a criterion fails (2 when the drill itself could not run).
//
//   npm run drill                                  # spec figures, fleet started here
//   npm run drill -- --card-rate 300 --fault-seconds 30
//   npm run drill -- --gateway http://gw:8080 --deck http://127.0.0.1:9090   # API_KEY, ADMIN_TOKEN, DATABASE_URL from env
//   npm run drill -- --fault cpu                   # a fault in the tax lane's own code (a fleet started here only)
//
// --fault slow-provider (default) is the sandbox's latency, set through the
// deck, so it works against any fleet. cpu, loop-block, memory and crash are
// put into the tax lane's own process by a preload (benchmarks/faults/) with a
// heap limit (--tax-heap-mb), which only a fleet the drill starts itself can
// carry: the deck has no admin route that loads code into, or kills, a lane's
// process, so against --gateway/--deck only slow-provider is possible. For those
// faults the tax lane's own answers (503 while it is down or overloaded) are
// reported, not judged; card-auth's are judged as always, and the criteria
// about tax shedding (SATURATED, shed timing, permits after) are replaced by
// "the fault took effect".
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import pg from 'pg'
import { Pool } from 'undici'
import type * as hdr from 'hdr-histogram-js'
import { loadCardToken, seedLoadCards } from '../../services/card-auth/seed.ts'
import { DECK_ROLE, JOBS_ROLE, LANE_DEFAULTS, LANE_NAMES } from '../../shared/lanes.ts'
import { newHistogram, runOpenLoop, summary } from '../open-loop.ts'
import { pinSelf, startLocalFleet, type LocalFleet } from '../local-fleet.ts'
import { gatewayPost, gitCommit, machine as machineLine, numberFlag, parseFlags, serverTiming, sleep } from '../run-info.ts'
import { evaluate, SPEC_THRESHOLDS, type Criterion, type DrillFigures } from './criteria.ts'
import { compilePreload, FaultSwitch, taxNodeArgs } from '../faults/control.ts'
import { describeFault, FAULTS, type FaultName } from '../faults/spec.ts'
import { renderReport, type Chart } from './html-report.ts'
import { cpuBetween, cpuMark, cpuRows, type CpuMark, type CpuPhase } from '../cpu-phases.ts'

const { values: a } = parseFlags({
  options: {
    'card-rate': { type: 'string', default: '1400' },
    'tax-rate': { type: 'string', default: '150' },
    'storm-clients': { type: 'string', default: '10' },
    'storm-interval-ms': { type: 'string', default: '50' },
    'warmup-seconds': { type: 'string', default: '20' },
    'baseline-seconds': { type: 'string', default: '20' },
    'fault-seconds': { type: 'string', default: '120' },
    'recovery-seconds': { type: 'string', default: '20' },
    'settle-timeout-seconds': { type: 'string', default: '60' },
    'fault-latency-ms': { type: 'string', default: '8000' },
    'normal-latency-ms': { type: 'string', default: '20' },
    'card-p99-ms': { type: 'string', default: String(SPEC_THRESHOLDS.cardP99Ms) },
    fault: { type: 'string', default: 'slow-provider' },
    'tax-heap-mb': { type: 'string', default: '256' },
    gateway: { type: 'string' },
    deck: { type: 'string' },
    out: { type: 'string', default: 'test-artifacts/drill' },
    'data-dir': { type: 'string' },
    'base-port': { type: 'string', default: '18380' },
    // Unpinned by default: fleet and load generator share the machine, as the issue's
    // own run did ("a 2-core machine, load generator included"). Pinned to one core
    // each, the fleet used at most one while the machine stood 0.6 of a core idle.
    'fleet-cpus': { type: 'string' },
    'generator-cpus': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
}, 'npm run drill -- --help lists the flags')
if (a.help) {
  console.log(`npm run drill -- [flags]   (every flag: benchmarks/drill/main.ts)
  --fault F         slow-provider (default) | cpu | loop-block | memory | crash
                    slow-provider: the tax sandbox answers in --fault-latency-ms (8000), set through the deck;
                      the only fault possible against a fleet the drill did not start (--gateway/--deck).
                    cpu, loop-block, memory, crash: in the tax lane's own process (a preload, heap limit
                      --tax-heap-mb 256), so only on a fleet the drill starts itself; the deck has no admin
                      that loads code into, or kills, a lane's process.
  --card-rate, --tax-rate, --fault-seconds, --baseline-seconds, --recovery-seconds, --warmup-seconds
  --fleet-cpus L --generator-cpus L   pin the fleet (once up) and the load generator with taskset, e.g. 0 and 1
                    (default: neither pinned, both share the machine)
  --gateway URL --deck URL   a running fleet (API_KEY, ADMIN_TOKEN, DATABASE_URL from env)`)
  process.exit(0)
}
const num = (k: keyof typeof a, min: number, max: number): number => numberFlag(a, k, min, max)
const P = {
  cardRate: num('card-rate', 1, 20_000), taxRate: num('tax-rate', 1, 5_000),
  stormClients: num('storm-clients', 0, 500), stormIntervalMs: num('storm-interval-ms', 1, 10_000),
  warmupS: num('warmup-seconds', 0, 600), baselineS: num('baseline-seconds', 1, 3_600), faultS: num('fault-seconds', 1, 3_600), recoveryS: num('recovery-seconds', 5, 3_600),
  settleTimeoutS: num('settle-timeout-seconds', 1, 3_600),
  faultLatencyMs: num('fault-latency-ms', 0, 60_000), normalLatencyMs: num('normal-latency-ms', 0, 199),
  cardP99Ms: num('card-p99-ms', 0, 60_000),
}
const faultName = a.fault as FaultName
if (!(FAULTS as readonly string[]).includes(faultName)) { console.error(`--fault: one of ${FAULTS.join(', ')}`); process.exit(2) }
if (faultName !== 'slow-provider' && a.gateway) {
  console.error(`--fault ${faultName} needs a fleet the drill starts itself: from outside (--gateway/--deck) only slow-provider is possible (the deck sets the sandbox's latency; it has no admin that loads code into, or kills, a lane's process)`)
  process.exit(2)
}
const heapMb = num('tax-heap-mb', 32, 65_536)
const argv = process.argv.slice(2).join(' ')
const command = `npm run drill${argv ? ' -- ' + argv : ''}`
const outDir = path.resolve(a.out!)
const runId = crypto.randomBytes(4).toString('hex')

// ---- the fleet ------------------------------------------------------------
interface Target { gatewayUrl: string, deckUrl: string, apiKey: string, adminToken: string, databaseUrl: string, sandboxUrl?: string, workerTaxUrl?: string, stop (): Promise<void>, pinned: string | undefined, pinnedProcesses: number, own: boolean, pid?: number }
async function fleetUnderTest (): Promise<Target> {
  if (a.gateway) {
    const need = ['API_KEY', 'ADMIN_TOKEN', 'DATABASE_URL'].filter(k => !process.env[k])
    if (!a.deck || need.length) { console.error(`--gateway needs --deck and the env ${need.join(', ') || '(set)'}`); process.exit(2) }
    return { gatewayUrl: a.gateway, deckUrl: a.deck, apiKey: process.env.API_KEY!, adminToken: process.env.ADMIN_TOKEN!, databaseUrl: process.env.DATABASE_URL!, stop: async () => {}, pinned: undefined, pinnedProcesses: 0, own: false }
  }
  // A fault in the tax lane's code: the preload and a heap limit on the tax lane alone.
  const code = codeFault ? { ...codeFault.env, FLEET_NODE_ARGS_TAX: taxNodeArgs(compilePreload(path.resolve(dataDir)), heapMb).join(' ') } : {}
  const fleet: LocalFleet = await startLocalFleet({
    dataDir, basePort: num('base-port', 1_024, 65_000), cpus: a['fleet-cpus'],
    // The deck polls every 500 ms, each lane under a 500 ms deadline (the deck's
    // default): the recovery time is read from it. At 250 / 200 ms a P2 lane starved of
    // CPU at the spec's rates, slow rather than gone, timed out in 640 of 643 polls and
    // its state was never seen. A slow answer is timed when it came back (below).
    env: { DECK_POLL_MS: '500', DECK_TARGET_TIMEOUT_MS: '500', ...code },
  })
  return { ...fleet, own: true }
}

// Each run starts from an empty database. A previous run's data was load and state
// this one did not make: its ~20,000 compensated quotes left as many reconcile jobs,
// which the tax worker drains at 10/s for half an hour, through the next runs'
// baselines. The default directory is the drill's own and is emptied at the start
// (the last run's data stays there to look at until the next); one given with
// --data-dir is used as it is.
const dataDir = a['data-dir'] ?? '.data/drill'
if (a['data-dir'] === undefined && !a.gateway) fs.rmSync(path.resolve(dataDir), { recursive: true, force: true })
const q = (h: hdr.Histogram) => summary(h)
const codeFault = faultName === 'slow-provider' ? undefined : (fs.mkdirSync(path.resolve(dataDir), { recursive: true }), new FaultSwitch(path.resolve(dataDir, 'tax-fault.json')))
const faultText = faultName === 'slow-provider' ? `tax sandbox at ${P.faultLatencyMs} ms` : describeFault(faultName, undefined, heapMb)

async function main (): Promise<number> {
  const fleet = await fleetUnderTest()
  const pinned = fleet.own && a['generator-cpus'] ? pinSelf(a['generator-cpus']) : false
  const deck = new Pool(fleet.deckUrl, { connections: 4 })
  const cardPool = new Pool(fleet.gatewayUrl, { connections: Math.min(2_048, Math.ceil(P.cardRate * 0.6) + 16) })
  const taxPool = new Pool(fleet.gatewayUrl, { connections: Math.min(2_048, Math.ceil(P.taxRate * 2.5) + 16) })
  const stormPool = new Pool(fleet.gatewayUrl, { connections: Math.max(1, P.stormClients) })
  const db = new pg.Client({ connectionString: fleet.databaseUrl })
  try {
    await db.connect()
    await seedLoadCards(db, 1_000)
    const admin = async (method: 'GET' | 'PUT', p: string, body?: unknown): Promise<any> => {
      const r = await deck.request({ method, path: p, headers: { authorization: `Bearer ${fleet.adminToken}`, 'x-operator': 'mc-rt-01-drill', ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined, signal: AbortSignal.timeout(5_000) })
      const json = await r.body.json()
      if (r.statusCode !== 200) throw new Error(`deck ${method} ${p}: ${r.statusCode} ${JSON.stringify(json)}`)
      return json
    }
    const setLatency = (ms: number) => admin('PUT', '/admin/faults/tax', { latencyMs: ms })
    const setFault = async (on: boolean): Promise<void> => {
      if (!codeFault) return void await setLatency(on ? P.faultLatencyMs : P.normalLatencyMs)
      codeFault.set(on && faultName !== 'slow-provider' ? faultName : 'none')
    }
    const post = (p: Pool, path_: string, key: string, body: unknown) => gatewayPost(p, fleet.apiKey, path_, key, body)
    const cardBody = (i: number) => ({ merchantId: 'm_drill', cardToken: loadCardToken(i), amount: { value: 1, currency: 'EUR' } })
    await setLatency(P.normalLatencyMs)

    // ---- warm-up: a cold fleet (JIT, pools, caches) at a gentle rate, not recorded ----
    if (P.warmupS > 0) {
      // Tax starts at 5 req/s: a cold tax lane (15 permits, no queue) saturated at 30 req/s
      // in its first seconds on this machine, and then needs its 10 s recovery window.
      const gentle = { card: Math.min(P.cardRate, 150), tax: Math.min(P.taxRate, 5) }
      console.log(`warm-up ${P.warmupS} s, not recorded: half at ${gentle.card} card + ${gentle.tax} tax req/s (a cold fleet: JIT, pools), half at the full rates`)
      const warm = async (p: Pool, path_: string, key: string, body: unknown): Promise<number> => {
        const r = await post(p, path_, key, body)
        await r.body.dump()
        return r.statusCode
      }
      let w = 0
      for (const [cr, tr] of [[gentle.card, gentle.tax], [P.cardRate, P.taxRate]] as const) {
        await Promise.all([
          runOpenLoop({ rate: cr, durationMs: P.warmupS * 500, send: () => { const j = w++; return warm(cardPool, '/v1/authorizations', `drill-${runId}-wc-${j}`, cardBody(j)).catch(() => 0) } }),
          runOpenLoop({ rate: tr, durationMs: P.warmupS * 500, send: () => warm(taxPool, '/v1/tax/quotes', `drill-${runId}-wt-${w++}`, { jurisdiction: 'DE', amount: { value: 10_000, currency: 'EUR' } }).catch(() => 0) }),
        ])
      }
    }

    // ---- settle: the baseline starts from a fleet whose lanes are all NORMAL ----
    // A lane the warm-up pushed into SATURATED (a cold process on a slow host) is
    // RECOVERING until its active permits stay low for the recovery window (10 s);
    // a baseline begun then would measure the warm-up, and the fault's transitions
    // would start mid-way. No load runs while the drill waits.
    const settleFrom = performance.now()
    let notNormal: string[] = []
    let firstNotNormal: string[] | undefined
    for (;;) {
      const v = await admin('GET', '/admin/lanes')
      notNormal = (v.lanes as Array<{ name: string, up: boolean, status?: { state?: string } }>).filter(l => !l.up || l.status?.state !== 'NORMAL').map(l => `${l.name} ${l.up ? l.status?.state : 'down'}`)
      firstNotNormal ??= notNormal
      if (notNormal.length === 0) break
      if (performance.now() - settleFrom > P.settleTimeoutS * 1000) throw new Error(`lanes not NORMAL ${P.settleTimeoutS} s after the warm-up: ${notNormal.join(', ')}`)
      await sleep(250)
    }
    const settledMs = Math.round(performance.now() - settleFrom)
    console.log(`every lane NORMAL ${settledMs} ms after the warm-up${firstNotNormal!.length ? ` (it left ${firstNotNormal!.join(', ')})` : ''}`)

    // ---- deck samples ------------------------------------------------------
    const t0 = performance.now()
    const wall0 = Date.now()
    const at = (): number => (performance.now() - t0) / 1000
    interface Sample { s: number, lanes: Record<string, { up: boolean, error: string | null, state: string | null, active: number | null, permits: number | null, breaker: string | null, probes: number | null, checkedAt: number, answeredAt: number }>, rssBytes: number, processes: number }
    const samples: Sample[] = []
    let sampling = true
    const sampler = (async () => {
      while (sampling) {
        const began = performance.now()
        try {
          const v = await admin('GET', '/admin/lanes')
          const lanes: Sample['lanes'] = {}
          let rss = v.deck?.rssBytes ?? 0
          let processes = 1
          for (const l of v.lanes) {
            lanes[l.name] = { up: l.up, error: l.up ? null : (l.error ?? 'unknown'), state: l.status?.state ?? null, active: l.status?.active ?? null, permits: l.status?.permits ?? null, breaker: l.status?.breakers?.[0]?.state ?? null, probes: l.status?.breakers?.[0]?.probes ?? null, checkedAt: Date.parse(l.checkedAt), answeredAt: Date.parse(l.checkedAt) + (l.pollMs ?? 0) }
            if (l.rssBytes) { rss += l.rssBytes; processes++ }
          }
          for (const p of v.processes) if (p.rssBytes) { rss += p.rssBytes; processes++ }
          samples.push({ s: at(), lanes, rssBytes: rss, processes })
        } catch { /* a missed sample shows as a gap */ }
        await sleep(Math.max(0, 250 - (performance.now() - began)))
      }
    })()

    // ---- phases --------------------------------------------------------------
    const W = 0; const B = P.baselineS; const F = P.faultS; const R = P.recoveryS
    const faultFrom = W + B; const faultTo = W + B + F; const end = faultTo + R
    const phaseOf = (s: number): 'baseline' | 'fault' | 'recovery' => s < faultFrom ? 'baseline' : s < faultTo ? 'fault' : 'recovery'
    const seconds = Math.ceil(end)
    const perSec = <T>(mk: () => T): T[] => Array.from({ length: seconds + 1 }, mk)

    // ---- card-auth stream ---------------------------------------------------
    const cardH = { baseline: newHistogram(), fault: newHistogram(), recovery: newHistogram() }
    const cardSec = perSec(() => ({ h: newHistogram(), ok: 0, r429: 0, err: 0 }))
    const cardInfo = new Map<number, { code?: string }>()
    const acknowledged = new Map<string, string>() // key -> authorization id
    const refused = new Set<string>() // keys answered with a refusal (must not be in the database)
    const cardCodes: Record<string, number> = {}
    let cardErrors = 0
    const cardKey = (i: number): string => `drill-${runId}-c-${i}`
    const sendCard = async (i: number): Promise<number> => {
      const key = cardKey(i)
      const r = await post(cardPool, '/v1/authorizations', key, cardBody(i))
      const json = await r.body.json().catch(() => ({})) as { id?: string, code?: string }
      if (r.statusCode === 201 && json.id) acknowledged.set(key, json.id)
      else { refused.add(key); cardInfo.set(i, { code: json.code }) }
      return r.statusCode
    }
    const onCard = (i: number, scheduled: number, us: number, status: string): void => {
      const s = (scheduled - t0) / 1000
      const ph = phaseOf(s)
      const sec = cardSec[Math.min(seconds, Math.floor(s))]!
      sec.h.recordValue(us)
      const code = cardInfo.get(i)?.code ?? status
      cardInfo.delete(i)
      if (status === '201') sec.ok++
      else if (status === '429') { sec.r429++; cardCodes[code] = (cardCodes[code] ?? 0) + 1 } else { sec.err++; cardErrors++; cardCodes[code] = (cardCodes[code] ?? 0) + 1; if (status === 'error') refused.delete(cardKey(i)) }
      cardH[ph].recordValue(us)
    }

    // ---- tax stream ---------------------------------------------------------
    const taxSec = perSec(() => ({ h: newHistogram(), ok: 0, shed: 0, compensated: 0, err: 0 }))
    const taxInfo = new Map<number, { shed: boolean, compensated: string | null, code?: string }>()
    // MC-RT-01's "time to shed tax load (< 5 ms per rejected request)": each shed
    // answer as the client sees it, from its scheduled send to its answer (through
    // the gateway); the lane's own decision (Server-Timing admit), its whole
    // answer, the commit included (Server-Timing answer), and the gateway's
    // (Server-Timing gateway: arrival there to the answer ready) beside it. A
    // fleet the drill did not start shows them with GATEWAY_SERVER_TIMING=on.
    const shedClient = newHistogram(); const shedLane = newHistogram(); const shedAnswer = newHistogram(); const shedGateway = newHistogram()
    let shedCount = 0; let shedUnder = 0
    const taxCodes: Record<string, number> = {}
    let taxErrors = 0; let taxShed = 0
    const isShed = (status: number, compensated: string | null, code?: string): boolean => compensated === 'saturated' || (status === 503 && code === 'ERR_TAX_BULKHEAD_SATURATED')
    const sendTax = async (i: number): Promise<number> => {
      const r = await post(taxPool, '/v1/tax/quotes', `drill-${runId}-t-${i}`, { jurisdiction: ['US-CA', 'US-NY', 'DE', 'FR', 'GB'][i % 5], amount: { value: 10_000, currency: 'EUR' } })
      const json = await r.body.json().catch(() => ({})) as { code?: string }
      const compensated = (r.headers['x-tax-compensation'] as string | undefined) ?? null
      const shed = isShed(r.statusCode, compensated, json.code)
      if (shed) {
        for (const [name, h] of [['admit', shedLane], ['answer', shedAnswer], ['gateway', shedGateway]] as const) {
          const ms = serverTiming(r.headers['server-timing'], name)
          if (ms !== null) h.recordValue(Math.max(1, Math.round(ms * 1000)))
        }
      }
      taxInfo.set(i, { shed, compensated, code: json.code })
      return r.statusCode
    }
    const onTax = (i: number, scheduled: number, us: number, status: string): void => {
      const s = (scheduled - t0) / 1000
      const sec = taxSec[Math.min(seconds, Math.floor(s))]!
      const info = taxInfo.get(i) ?? { shed: false, compensated: null }
      taxInfo.delete(i)
      sec.h.recordValue(us)
      const key = info.code ?? (info.compensated ? `compensated:${info.compensated}` : status)
      taxCodes[key] = (taxCodes[key] ?? 0) + 1
      if (info.shed) { sec.shed++; taxShed++; shedCount++; if (us < 5_000) shedUnder++; shedClient.recordValue(us) }
      if (info.compensated) sec.compensated++
      if (status === '200' || status === '429' || info.shed) sec.ok++
      else { sec.err++; taxErrors++ }
    }

    // ---- INC-4491: the same quote re-sent every 50 ms, no backoff, no jitter ----
    const stormSec = perSec(() => ({ sent: 0, blocked: 0 }))
    const stormCodes: Record<string, number> = {}
    let stormErrors = 0
    const reachedPerKey: number[] = []
    const storm = async (j: number): Promise<void> => {
      await sleep(faultFrom * 1000 - (performance.now() - t0))
      const key = `drill-${runId}-s-${j}`
      const body = { jurisdiction: 'US-CA', amount: { value: 5_000, currency: 'USD' } }
      const reached: number[] = []
      while (at() < faultTo) {
        const sec = stormSec[Math.min(seconds, Math.floor(at()))]!
        sec.sent++
        try {
          const r = await post(stormPool, '/v1/tax/quotes', key, body)
          const json = await r.body.json().catch(() => ({})) as { code?: string }
          const k = json.code ?? String(r.statusCode)
          stormCodes[k] = (stormCodes[k] ?? 0) + 1
          if (r.statusCode === 429 && json.code === 'ERR_RETRY_STORM_BLOCKED') sec.blocked++
          // Answered by the tax lane: a quote (provider, compensated or replayed) or its shed 503.
          else if (r.statusCode === 200 || json.code === 'ERR_TAX_BULKHEAD_SATURATED') reached.push(at())
          // Refused by the gateway itself for another reason: a 429 is designed, anything else is an error.
          else if (r.statusCode !== 429) stormErrors++
        } catch { stormErrors++; stormCodes.error = (stormCodes.error ?? 0) + 1 }
        await sleep(P.stormIntervalMs)
      }
      // ADV-IR-01: at most 4 attempts of one key in ANY 10 s window (the busiest one counts).
      reachedPerKey[j] = Math.max(0, ...reached.map(s0 => reached.filter(x => x >= s0 && x < s0 + 10).length))
    }

    // ---- run ------------------------------------------------------------------
    console.log(`drill ${runId}: card ${P.cardRate}/s, tax ${P.taxRate}/s, ${P.stormClients} retrying clients; baseline ${B} s, fault ${F} s (${faultText}), recovery ${R} s`)
    const faultMarks = { setAt: NaN, clearedAt: NaN, clearedWall: NaN }
    // The provider's own count of the quotes it was asked (a fleet started here: its
    // sandbox). Under its latency fault only those it labelled `slow`: the calls that
    // arrived while the fault was on, not the ones made at normal latency while the
    // deck set and cleared it.
    const callMode = faultName === 'slow-provider' ? 'mode="slow"' : ''
    const providerCalls = async (): Promise<number | null> => {
      if (!fleet.sandboxUrl) return null
      const text = await (await fetch(`${fleet.sandboxUrl}/metrics`)).text()
      return [...text.matchAll(/^sandbox_quotes_total\{([^}]*)\} (\S+)$/gm)].filter(m => m[1]!.includes(callMode)).reduce((n, m) => n + Number(m[2]), 0)
    }
    const callsAt: Array<number | null> = []
    // worker-tax's own probes of the provider (its breaker's, from its /status).
    const workerProbes = async (): Promise<number | null> => {
      if (!fleet.workerTaxUrl) return null
      const s = await (await fetch(`${fleet.workerTaxUrl}/status`)).json() as { breakers?: Array<{ probes: number }> }
      return s.breakers?.[0]?.probes ?? null
    }
    const workerProbesAt: Array<number | null> = []
    /** What a counter read at the fault's start and end moved by (null if either was not read). */
    const inFault = (at: Array<number | null>): number | null => typeof at[0] === 'number' && typeof at[1] === 'number' ? at[1] - at[0] : null
    // CPU of every process and of the machine at the load's start, the fault's
    // start and end, and the load's end: what each phase used, in cores.
    const cpuMarks: CpuMark[] = [await cpuMark(fleet.pid, db)]
    const fault = (async () => {
      await sleep(faultFrom * 1000 - (performance.now() - t0))
      callsAt.push(await providerCalls())
      workerProbesAt.push(await workerProbes())
      await setFault(true); faultMarks.setAt = at()
      cpuMarks.push(await cpuMark(fleet.pid, db))
      console.log(`  fault on at ${faultMarks.setAt.toFixed(1)} s`)
      await sleep(faultTo * 1000 - (performance.now() - t0))
      await setFault(false); faultMarks.clearedAt = at(); faultMarks.clearedWall = Date.now()
      callsAt.push(await providerCalls())
      workerProbesAt.push(await workerProbes())
      cpuMarks.push(await cpuMark(fleet.pid, db))
      console.log(`  fault off at ${faultMarks.clearedAt.toFixed(1)} s`)
    })()
    // The load generator's own event-loop delay: a share of every latency it
    // measures (one process sends all three streams), reported beside them.
    const LOOP_TIMER_MS = 5
    const generatorLoop = monitorEventLoopDelay({ resolution: LOOP_TIMER_MS })
    generatorLoop.enable()
    const [cardRun, taxRun] = await Promise.all([
      runOpenLoop({ rate: P.cardRate, durationMs: end * 1000, send: sendCard, onResult: onCard }),
      runOpenLoop({ rate: P.taxRate, durationMs: end * 1000, send: sendTax, onResult: onTax }),
      fault,
      ...Array.from({ length: P.stormClients }, (_x, j) => storm(j)),
    ])
    cpuMarks.push(await cpuMark(fleet.pid, db))
    sampling = false
    await sampler
    generatorLoop.disable()
    // Its samples are whole timer intervals: the delay is what came beyond the timer's own 5 ms.
    const loopMs = (ns: number): number => Math.max(0, Math.round((ns / 1e6 - LOOP_TIMER_MS) * 100) / 100)
    const generatorDelay = { p50Ms: loopMs(generatorLoop.percentile(50)), p99Ms: loopMs(generatorLoop.percentile(99)), maxMs: loopMs(generatorLoop.max) }
    console.log(`  load done at ${at().toFixed(1)} s (card sent ${cardRun.sentRate.toFixed(0)}/s, send lag p50 ${cardRun.sendLag.p50Ms} ms, p99 ${cardRun.sendLag.p99Ms} ms, max ${cardRun.maxSendLagMs.toFixed(1)} ms;` +
      ` tax sent ${taxRun.sentRate.toFixed(0)}/s, send lag p50 ${taxRun.sendLag.p50Ms} ms, p99 ${taxRun.sendLag.p99Ms} ms, max ${taxRun.maxSendLagMs.toFixed(1)} ms;` +
      ` the generator's event-loop delay p50 ${generatorDelay.p50Ms} ms, p99 ${generatorDelay.p99Ms} ms, max ${generatorDelay.maxMs} ms)`)

    // ---- after: recovery, ledger, connections -----------------------------------
    const taxSamples = samples.flatMap(s => s.lanes.tax ? [{ s: s.s, ...s.lanes.tax }] : [])
    const saturatedSeen = taxSamples.some(s => s.state === 'SATURATED')
    // The first poll sent after the fault was cleared that found fewer than 5 permits in
    // use, timed at its answer: the lane's count was true at some moment of the poll, so
    // this never reads a recovery earlier than it was.
    const back = taxSamples.find(s => s.checkedAt >= faultMarks.clearedWall && s.active !== null && s.active < 5)
    const taxRecoveryMs = back ? back.answeredAt - faultMarks.clearedWall : null
    // The provider's breaker (issue 43's figures): tax answers during the fault,
    // the provider's calls in it, and the first poll after the heal that found it closed.
    const taxFaultH = taxSec.slice(Math.floor(faultFrom), Math.ceil(faultTo)).reduce((h, x) => { h.add(x.h); return h }, newHistogram())
    const closedAgain = taxSamples.find(s => s.checkedAt >= faultMarks.clearedWall && s.breaker === 'closed')
    // The lane's own probes in the fault (the rest of the provider's calls: the lane's calls before it opened, and worker-tax's).
    const probesAt = (wall: number): number | null => taxSamples.filter(s => s.checkedAt <= wall && s.probes !== null).at(-1)?.probes ?? null
    const faultSetWall = wall0 + faultMarks.setAt * 1000
    const laneProbes = probesAt(faultMarks.clearedWall)
    const breaker = {
      opened: taxSamples.some(s => s.s >= faultFrom && s.breaker !== null && s.breaker !== 'closed'),
      taxInFault: q(taxFaultH),
      providerCallsInFault: inFault(callsAt),
      closedAfterHealMs: closedAgain ? closedAgain.answeredAt - faultMarks.clearedWall : null,
      laneProbesInFault: laneProbes !== null ? laneProbes - (probesAt(faultSetWall) ?? 0) : null,
      workerProbesInFault: inFault(workerProbesAt),
    }
    // Why the deck saw a lane down, per lane: `timeout` (it did not answer its
    // status poll within the deck's deadline), `refused`, `http 503`, ...
    const downReasons: Record<string, Record<string, number>> = {}
    for (const x of samples) {
      for (const [lane, v] of Object.entries(x.lanes)) {
        if (v.up) continue
        const r = (downReasons[lane] ??= {})
        const why = v.error ?? 'unknown'
        r[why] = (r[why] ?? 0) + 1
      }
    }
    const transitions: Array<{ s: number, lane: string, from: string | null, to: string | null }> = []
    for (const lane of LANE_NAMES) {
      let prev: string | null | undefined
      for (const s of samples) { const st = s.lanes[lane]?.state; if (st !== undefined && st !== prev) { if (prev !== undefined) transitions.push({ s: s.s, lane, from: prev, to: st }); prev = st } }
    }

    const ledgerRows = await db.query<{ idempotency_key: string, n: string, ids: string[], approved: string, holds: string }>(
      `select a.idempotency_key, count(distinct a.id) n, array_agg(distinct a.id::text) ids,
              count(distinct a.id) filter (where a.status = 'approved') approved, count(h.id) holds
         from card_auth.authorizations a left join card_auth.holds h on h.authorization_id = a.id
        where a.idempotency_key like $1 group by a.idempotency_key`, [`drill-${runId}-c-%`])
    const inDb = new Map(ledgerRows.rows.map(r => [r.idempotency_key, r]))
    let lost = 0; let doubled = 0; let phantom = 0
    for (const [key, id] of acknowledged) { const r = inDb.get(key); if (!r || !r.ids.includes(id)) lost++ }
    for (const r of ledgerRows.rows) if (Number(r.n) > 1 || Number(r.holds) !== Number(r.approved)) doubled++
    for (const key of refused) if (inDb.has(key)) phantom++

    const roles = [...LANE_NAMES.map(l => LANE_DEFAULTS[l].role), JOBS_ROLE.role, DECK_ROLE.role].map(r => (process.env.ROLE_PREFIX ?? '') + r)
    // Orphaned: a backend that is still busy (active, or idle in a transaction) in
    // two looks 5 s apart without its state having changed: nothing is running
    // any more, so nothing should be holding it.
    interface Backend { pid: number, role: string, state: string | null, state_change: string | null, wait_event: string | null, query: string }
    const census = async (): Promise<Backend[]> => (await db.query<Backend>(
      `select pid, usename as role, state, state_change::text, wait_event, left(query, 120) as query from pg_stat_activity
        where usename = any($1) and pid <> pg_backend_pid()`, [roles])).rows
    const first = await census()
    await sleep(5_000)
    const second = await census()
    const busy = (b: Backend): boolean => b.state === 'active' || (b.state ?? '').startsWith('idle in transaction')
    const stuck = second.filter(b => busy(b) && first.some(f => f.pid === b.pid && f.state === b.state && f.state_change === b.state_change))
    const limits = new Map((await db.query<{ rolname: string, rolconnlimit: number }>('select rolname, rolconnlimit from pg_roles where rolname = any($1)', [roles])).rows.map(r => [r.rolname, r.rolconnlimit]))
    const connections = roles.filter(r => limits.has(r)).map(role => {
      const mine = second.filter(b => b.role === role)
      return {
        role, limit: limits.get(role)!, total: mine.length,
        active: mine.filter(b => b.state === 'active').length, idle: mine.filter(b => b.state === 'idle').length,
        idleInTransaction: mine.filter(b => (b.state ?? '').startsWith('idle in transaction')).length,
        orphaned: stuck.filter(b => b.role === role).length,
        stuck: stuck.filter(b => b.role === role).map(b => ({ pid: b.pid, state: b.state, since: b.state_change, waitEvent: b.wait_event, query: b.query })),
      }
    })

    // ---- figures and verdict ------------------------------------------------------
    const rssIn = (from: number, to: number): number[] => samples.filter(s => s.s >= from && s.s < to).map(s => s.rssBytes)
    const mb = (b: number | undefined): number => Math.round((b ?? 0) / 1e5) / 10
    const rss = {
      // The most processes one poll saw: a process that missed the last poll is still one.
      processes: Math.max(0, ...samples.map(s => s.processes)),
      beforeMb: mb(rssIn(W, faultFrom).at(-1)),
      duringPeakMb: mb(Math.max(0, ...rssIn(faultFrom, faultTo))),
      afterMb: mb(rssIn(faultTo, end + 10).at(-1)),
    }
    const storms = { clients: P.stormClients, sent: stormSec.reduce((x, s) => x + s.sent, 0), blocked: stormSec.reduce((x, s) => x + s.blocked, 0), codes: stormCodes, reachedPerKey, errors: stormErrors }
    const allowedPerKey = 4
    const d = q(shedClient); const dl = q(shedLane); const da = q(shedAnswer); const dg = q(shedGateway)
    const figures: DrillFigures = {
      card: { fault: q(cardH.fault), errors: cardErrors },
      tax: { shed: taxShed, decided: { count: shedCount, under5: shedUnder, p50Ms: d.p50Ms, p99Ms: d.p99Ms, maxMs: d.maxMs, lane: { p50Ms: dl.p50Ms, p99Ms: dl.p99Ms, maxMs: dl.maxMs }, laneAnswer: { p50Ms: da.p50Ms, p99Ms: da.p99Ms, maxMs: da.maxMs }, ...(dg.count ? { gateway: { p50Ms: dg.p50Ms, p99Ms: dg.p99Ms, maxMs: dg.maxMs } } : {}) }, errors: taxErrors, saturatedSeen },
      storm: { errors: stormErrors, maxReachedPerKey: Math.max(0, ...reachedPerKey), allowedPerKey },
      taxRecoveryMs,
      ledger: { acknowledged: acknowledged.size, lost, doubled, phantom },
      connections,
    }
    const criteria = judged(evaluate(figures, { ...SPEC_THRESHOLDS, cardP99Ms: P.cardP99Ms }), {
      degraded: taxSec.slice(Math.floor(faultFrom), Math.ceil(faultTo)).reduce((x, t) => x + t.err + t.shed + t.compensated, 0),
      down: samples.filter(x => x.s >= faultFrom && x.s < faultTo + 1 && x.lanes.tax && !x.lanes.tax.up).length,
      cardErrors, taxErrors, stormErrors,
    })
    const pass = criteria.every(c => c.pass)

    // Cores used per phase (a fault that failed to switch leaves fewer marks: no table).
    const [m0, m1, m2, m3] = cpuMarks
    const cpu: Record<string, CpuPhase> | null = m0 && m1 && m2 && m3 ? { baseline: cpuBetween(m0, m1), fault: cpuBetween(m1, m2), recovery: cpuBetween(m2, m3) } : null

    const commit = gitCommit()
    const machine = machineLine()
    const placement = fleet.own ? `fleet (${process.env.DATABASE_URL ? '' : 'PostgreSQL, '}gateway, lanes, workers, deck, sandbox${process.env.DATABASE_URL ? '; PostgreSQL at DATABASE_URL, not pinned' : ''}) ${fleet.pinned !== undefined ? `pinned to cpu ${fleet.pinned} (${fleet.pinnedProcesses} processes, once up)` : a['fleet-cpus'] ? 'not pinned (no taskset)' : 'not pinned'}, generator ${pinned ? `pinned to cpu ${a['generator-cpus']}` : 'not pinned'}` : `fleet at ${fleet.gatewayUrl} (not started here)`
    const phases = {
      warmupSeconds: P.warmupS, settledMs, baseline: [0, faultFrom], fault: [faultFrom, faultTo], recovery: [faultTo, end],
      faultSetAtS: faultMarks.setAt, faultClearedAtS: faultMarks.clearedAt,
    }
    const timeline = {
      second: cardSec.map((_x, i) => i),
      card: cardSec.map(s => ({ count: s.h.totalCount, ok: s.ok, r429: s.r429, errors: s.err, p50Ms: s.h.totalCount ? s.h.getValueAtPercentile(50) / 1000 : null, p99Ms: s.h.totalCount ? s.h.getValueAtPercentile(99) / 1000 : null, maxMs: s.h.totalCount ? s.h.maxValue / 1000 : null })),
      tax: taxSec.map(s => ({ count: s.h.totalCount, shed: s.shed, compensated: s.compensated, errors: s.err, p99Ms: s.h.totalCount ? s.h.getValueAtPercentile(99) / 1000 : null })),
      storm: stormSec,
      lanes: samples.map(s => ({ s: Math.round(s.s * 100) / 100, rssMb: mb(s.rssBytes), ...Object.fromEntries(Object.entries(s.lanes).map(([k, v]) => [k, { state: v.state, active: v.active, up: v.up, ...(v.up ? {} : { error: v.error }) }])) })),
    }
    const report = {
      drill: 'MC-RT-01', runId, command, date: new Date(wall0).toISOString(), commit, machine, placement,
      load: { tool: 'benchmarks/open-loop.ts: open loop on undici, one scheduler per stream, latency from the scheduled send time into HDR histograms (hdr-histogram-js)', card: { rate: P.cardRate, sentRate: cardRun.sentRate, maxSendLagMs: cardRun.maxSendLagMs, sendLag: cardRun.sendLag, scheduled: cardRun.scheduled }, tax: { rate: P.taxRate, sentRate: taxRun.sentRate, maxSendLagMs: taxRun.maxSendLagMs, sendLag: taxRun.sendLag, scheduled: taxRun.scheduled }, retryingClient: { clients: P.stormClients, intervalMs: P.stormIntervalMs }, generatorEventLoopDelay: generatorDelay },
      fault: { name: faultName, what: faultText, latencyMs: P.faultLatencyMs, normalLatencyMs: P.normalLatencyMs, seconds: F },
      phases, pass, criteria,
      card: { baseline: q(cardH.baseline), fault: q(cardH.fault), recovery: q(cardH.recovery), answers: { 201: acknowledged.size, ...cardCodes } },
      tax: { answers: taxCodes, shed: taxShed, shedAnswerMs: { count: shedCount, over5: shedCount - shedUnder, p50: d.p50Ms, p99: d.p99Ms, max: d.maxMs, laneDecision: { p50: dl.p50Ms, p99: dl.p99Ms, max: dl.maxMs }, laneAnswer: { p50: da.p50Ms, p99: da.p99Ms, max: da.maxMs }, gateway: dg.count ? { count: dg.count, p50: dg.p50Ms, p99: dg.p99Ms, max: dg.maxMs } : null }, recoveryMs: taxRecoveryMs, stateTransitions: transitions.filter(x => x.lane === 'tax'), breaker },
      otherLaneTransitions: transitions.filter(x => x.lane !== 'tax'),
      deckSawDown: { samples: samples.length, reasons: downReasons },
      retryingClient: { ...storms, allowedPerKey },
      ledger: figures.ledger, connections, rss, cpu, timeline,
    }
    fs.mkdirSync(outDir, { recursive: true })
    fs.writeFileSync(path.join(outDir, 'drill.json'), JSON.stringify(report, null, 2))
    fs.writeFileSync(path.join(outDir, 'drill.html'), html(report))

    // ---- console ----------------------------------------------------------------------
    console.log(`\n${command}\n${report.date}, commit ${commit}, ${machine}\n${placement}\n`)
    console.log('| criterion | limit | measured | verdict |\n|---|---|---|---|')
    for (const c of criteria) console.log(`| ${c.what} | ${c.limit} | ${c.measured} | ${c.pass ? 'pass' : 'FAIL'} |`)
    const row = (n: string, s: ReturnType<typeof q>): string => `| ${n} | ${s.count} | ${s.p50Ms.toFixed(1)} | ${s.p99Ms.toFixed(1)} | ${s.maxMs.toFixed(0)} |`
    console.log('\n| card-auth | requests | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|')
    console.log([row('baseline', q(cardH.baseline)), row('fault', q(cardH.fault)), row('recovery', q(cardH.recovery))].join('\n'))
    console.log(`\ncard answers ${JSON.stringify(report.card.answers)}; tax answers ${JSON.stringify(taxCodes)}`)
    console.log(`tax during the fault: p50 ${breaker.taxInFault.p50Ms} ms, p99 ${breaker.taxInFault.p99Ms} ms (${breaker.taxInFault.count} answers); provider calls in the fault ${breaker.providerCallsInFault ?? 'n/a'} (the lane's probes ${breaker.laneProbesInFault ?? 'n/a'}, worker-tax's ${breaker.workerProbesInFault ?? 'n/a'}); ` +
      `provider breaker ${breaker.opened ? `opened, closed ${breaker.closedAfterHealMs === null ? 'never seen' : `${Math.round(breaker.closedAfterHealMs)} ms`} after the heal` : 'never seen open'}`)
    console.log(`retrying client: ${storms.sent} sent, ${storms.blocked} blocked at the gateway, at most ${figures.storm.maxReachedPerKey} per key reached the lane`)
    console.log(`fleet RSS (${rss.processes} Node processes): before ${rss.beforeMb} MB, peak during ${rss.duringPeakMb} MB, after ${rss.afterMb} MB`)
    console.log(`deck samples with a lane down (of ${samples.length}): ${downSummary(downReasons)}`)
    console.log(`connections: ${connections.map(c => `${c.role} ${c.total}/${c.limit} (orphaned ${c.orphaned})`).join(', ')}`)
    if (cpu) {
      console.log('\n| CPU, cores used | baseline | fault | recovery |\n|---|---|---|---|')
      for (const r of cpuRows(cpu, 'fault')) console.log(`| ${r.join(' | ')} |`)
    }
    console.log(`\n${pass ? 'PASS' : 'FAIL'}: ${path.relative(process.cwd(), path.join(outDir, 'drill.html'))}, drill.json`)
    return pass ? 0 : 1
  } finally {
    await Promise.allSettled([cardPool.close(), taxPool.close(), stormPool.close(), deck.close(), db.end()])
    await fleet.stop()
  }
}

/**
 * For a fault in the tax lane's own code, the criteria about how tax sheds a slow
 * provider do not apply; whether the fault took effect, and card-auth's own
 * answers, are judged instead.
 */
function judged (all: Criterion[], f: { degraded: number, down: number, cardErrors: number, taxErrors: number, stormErrors: number }): Criterion[] {
  if (faultName === 'slow-provider') return all
  return [
    { id: 'fault-took-effect', what: `the fault took effect (${faultText})`, limit: 'tax answers degraded, or tax seen down by the deck', measured: `${f.degraded} tax answers not from the provider, tax down in ${f.down} deck samples`, pass: f.degraded + f.down > 0 },
    ...all.filter(c => c.id === 'card-p99'),
    { id: 'no-card-errors', what: 'card-auth answers other than 201 or a designed 429', limit: '0', measured: `${f.cardErrors} (the faulty tax lane's ${f.taxErrors} and the retrying client's ${f.stormErrors}: reported, not judged)`, pass: f.cardErrors === 0 },
    ...all.filter(c => ['retry-storm', 'ledger', 'orphaned-connections'].includes(c.id)),
  ]
}

/** "tax 640 × timeout; fraud 2 × timeout", or "none". */
function downSummary (reasons: Record<string, Record<string, number>>): string {
  return Object.entries(reasons).map(([lane, r]) => `${lane} ${Object.entries(r).map(([why, n]) => `${n} × ${why}`).join(', ')}`).join('; ') || 'none'
}

function html (r: any): string {
  const x: number[] = r.timeline.second
  const band = [{ from: r.phases.fault[0], to: r.phases.fault[1], label: r.fault.what }]
  const lanes = r.timeline.lanes as Array<Record<string, any>>
  const ls = lanes.map(l => l.s)
  const stateNum = (s: string | null): number | null => s === 'NORMAL' ? 0 : s === 'RECOVERING' ? 1 : s === 'SATURATED' ? 2 : null
  const colors: Record<string, string> = { 'card-auth': '#1f6feb', fraud: '#8250df', tax: '#d1242f' }
  const charts: Chart[] = [
    { title: 'card-auth latency from scheduled send (ms, log scale)', yLabel: 'ms', x, log: true, series: [
      { label: 'p50', values: r.timeline.card.map((c: any) => c.p50Ms && Math.max(0.01, c.p50Ms)), color: '#1f6feb' },
      { label: 'p99', values: r.timeline.card.map((c: any) => c.p99Ms && Math.max(0.01, c.p99Ms)), color: '#d1242f' },
      { label: 'max', values: r.timeline.card.map((c: any) => c.maxMs && Math.max(0.01, c.maxMs)), color: '#999', dash: true },
      { label: 'SLA 120 ms', values: x.map(() => 120), color: '#06702d', dash: true },
    ] },
    { title: 'answers per second', yLabel: 'req/s', x, series: [
      { label: 'card 201', values: r.timeline.card.map((c: any) => c.ok), color: '#1f6feb' },
      { label: 'card 429', values: r.timeline.card.map((c: any) => c.r429), color: '#bf8700' },
      { label: 'card errors', values: r.timeline.card.map((c: any) => c.errors), color: '#b00020' },
      { label: 'tax shed', values: r.timeline.tax.map((c: any) => c.shed), color: '#d1242f' },
      { label: 'tax compensated', values: r.timeline.tax.map((c: any) => c.compensated), color: '#8250df', dash: true },
      { label: 'retries blocked at gateway', values: r.timeline.storm.map((c: any) => c.blocked), color: '#444' },
    ] },
    { title: 'lane state (0 NORMAL, 1 RECOVERING, 2 SATURATED), from the deck (each lane polled every 500 ms)', yLabel: 'state', x: ls, step: true, series: LANE_NAMES.map(l => ({ label: l, values: lanes.map(s => stateNum(s[l]?.state ?? null)), color: colors[l]! })) },
    { title: 'active permits', yLabel: 'permits', x: ls, step: true, series: LANE_NAMES.map(l => ({ label: l, values: lanes.map(s => s[l]?.active ?? null), color: colors[l]! })) },
    { title: 'fleet RSS (sum over Node processes, MB)', yLabel: 'MB', x: ls, series: [{ label: 'RSS', values: lanes.map(s => s.rssMb), color: '#444' }] },
  ]
  const s = (n: string, v: any): Array<string | number> => [n, v.count, v.p50Ms.toFixed(1), v.p99Ms.toFixed(1), v.maxMs.toFixed(0)]
  return renderReport({
    title: `MC-RT-01 recovery drill — ${r.pass ? 'PASS' : 'FAIL'}`,
    subtitle: [r.command, `${r.date}, commit ${r.commit}, ${r.machine}`, r.placement, `load: card ${r.load.card.rate}/s (sent ${r.load.card.sentRate.toFixed(0)}/s), tax ${r.load.tax.rate}/s, ${r.load.retryingClient.clients} INC-4491 clients re-sending every ${r.load.retryingClient.intervalMs} ms; ${r.load.tool}`],
    verdict: { pass: r.pass, text: r.pass ? 'every criterion passed' : `${r.criteria.filter((c: any) => !c.pass).length} criterion failed` },
    tables: [
      { title: 'Criteria', head: ['criterion', 'limit', 'measured', 'verdict'], rows: r.criteria.map((c: any) => [c.what, c.limit, c.measured, c.pass ? 'pass' : 'fail']), passColumn: 3 },
      { title: 'card-auth latency by phase', head: ['phase', 'requests', 'p50 ms', 'p99 ms', 'max ms'], rows: [s('baseline', r.card.baseline), s('fault', r.card.fault), s('recovery', r.card.recovery)] },
      { title: 'Fleet RSS and connections', head: ['what', 'value'], rows: [
        ['RSS before / peak during / after', `${r.rss.beforeMb} / ${r.rss.duringPeakMb} / ${r.rss.afterMb} MB (${r.rss.processes} Node processes)`],
        ...r.connections.map((c: any) => [`connections ${c.role}`, `${c.total} of limit ${c.limit}: ${c.active} active, ${c.idle} idle, ${c.idleInTransaction} idle in transaction, ${c.orphaned} orphaned`]),
        ['tax state changes', r.tax.stateTransitions.map((t: any) => `${t.s.toFixed(1)} s ${t.from}→${t.to}`).join(', ') || 'none'],
        ['deck samples with a lane down', `of ${r.deckSawDown.samples}: ${downSummary(r.deckSawDown.reasons)}`],
        ['other lanes state changes', r.otherLaneTransitions.map((t: any) => `${t.s.toFixed(1)} s ${t.lane} ${t.from}→${t.to}`).join(', ') || 'none'],
        ['answers', `card ${JSON.stringify(r.card.answers)}; tax ${JSON.stringify(r.tax.answers)}; retrying client ${JSON.stringify(r.retryingClient.codes)}`],
      ] },
      ...(r.cpu ? [{ title: 'CPU by phase, cores used (fleet processes from /proc/<pid>/stat, PostgreSQL backends by role; the machine from /proc/stat)', head: ['process', 'baseline', 'fault', 'recovery'], rows: cpuRows(r.cpu, 'fault') }] : []),
    ],
    charts, bands: band,
  })
}

process.exitCode = await main().catch(err => { console.error('drill could not run:', err); return 2 })
