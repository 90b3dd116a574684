// One system under test, one fault after another: a warm-up, then per fault a
// baseline, the fault window and a recovery window, all under the same
// open-loop card and tax load. Every answer is kept with its scheduled send
// time, and each row's figures are cut from them afterwards, so a request
// counts in the window it was sent in, however late it was answered.
import { Pool, errors, request } from 'undici'
import { loadCardToken } from '../../services/card-auth/seed.ts'
import { newHistogram, runOpenLoop, summary } from '../open-loop.ts'
import { gatewayPost, sleep } from '../run-info.ts'
import type { FaultName } from '../faults/spec.ts'
import { rssOf, type System, type Topology } from './systems.ts'

export interface Params {
  cardRate: number
  taxRate: number
  warmupS: number
  baselineS: number
  faultS: number
  recoveryS: number
  clientTimeoutMs: number
  taxClientTimeoutMs: number
  slaMs: number
}

/** Switch a fault on or off in this system. */
export type FaultHook = (fault: FaultName, on: boolean) => Promise<void>

export interface Row {
  topology: Topology
  fault: FaultName
  card: {
    p50Ms: number, p99Ms: number, maxMs: number, count: number, errorRate: number, answers: Record<string, number>
  }
  baselineCardP99Ms: number
  /**
   * Seconds from the fault's end (crash: from the kill) until 3 s in a row were
   * normal; null: not within the recovery window.
   */
  recoveredS: { card: number | null, tax: number | null }
  tax: Record<string, number>
  peakRssMb: number
  processes: number
  /** Restarts of the process running tax code seen in the row (sampled every 0.5 s, so a quicker one can be missed). */
  taxRestarts: number
  eventLoop: { p99Ms: number | null, maxMs: number | null }
  /** For the JSON only: tax answers in the recovery window, and each second of the row (from its baseline's start). */
  taxAfter: Record<string, number>
  perSecond: Array<{ s: number, cardP99Ms: number | null, cardNot201: number, taxNotProvider: number }>
}

interface Answer { at: number, us: number, code: string }
interface Sample {
  at: number, rss: number, processes: number, taxPid: number | undefined, loopP99?: number, loopMax?: number
}

const transport = (err: unknown): string => {
  if (err instanceof errors.HeadersTimeoutError || err instanceof errors.BodyTimeoutError) return 'client timeout'
  const code = (err as { code?: string }).code
  return code === 'ECONNREFUSED' ? 'connection refused' : code === 'UND_ERR_SOCKET' || code === 'ECONNRESET' ? 'connection reset' : 'transport error'
}

function metric (text: string, name: string): number | undefined {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm').exec(text)
  return m ? Number(m[1]) * 1000 : undefined
}

export async function measure (
  topology: Topology, sys: System, apiKey: string, faults: FaultName[], P: Params, hook: FaultHook
): Promise<Row[]> {
  const cardPool = new Pool(sys.gatewayUrl, {
    connections: Math.ceil(P.cardRate * P.clientTimeoutMs / 1000) + 32,
    headersTimeout: P.clientTimeoutMs,
    bodyTimeout: P.clientTimeoutMs,
  })
  const taxPool = new Pool(sys.gatewayUrl, {
    connections: Math.ceil(P.taxRate * P.taxClientTimeoutMs / 1000) + 32,
    headersTimeout: P.taxClientTimeoutMs,
    bodyTimeout: P.taxClientTimeoutMs,
  })
  const run = `${topology}-${Date.now().toString(36)}`
  const cardCodes = new Map<number, string>(); const taxCodes = new Map<number, string>()
  const cards: Answer[] = []; const taxes: Answer[] = []
  const card = async (i: number): Promise<number> => {
    try {
      const r = await gatewayPost(cardPool, apiKey, '/v1/authorizations', `cmp-${run}-${i}`, {
        merchantId: 'm_compare',
        cardToken: loadCardToken(i),
        amount: { value: 1, currency: 'EUR' },
      })
      const j = await r.body.json().catch(() => ({})) as { code?: string }
      cardCodes.set(i, r.statusCode === 201 ? '201' : `${r.statusCode} ${j.code ?? ''}`.trim())
      return r.statusCode
    } catch (err) { cardCodes.set(i, transport(err)); throw err }
  }
  const tax = async (i: number): Promise<number> => {
    try {
      const r = await gatewayPost(taxPool, apiKey, '/v1/tax/quotes', `cmpt-${run}-${i}`, {
        jurisdiction: ['US-CA', 'DE', 'FR'][i % 3],
        amount: { value: 10_000, currency: 'EUR' },
      })
      const j = await r.body.json().catch(() => ({})) as { code?: string, source?: string }
      taxCodes.set(i, r.statusCode === 200 ? `200 ${j.source ?? ''}`.trim() : `${r.statusCode} ${j.code ?? ''}`.trim())
      return r.statusCode
    } catch (err) { taxCodes.set(i, transport(err)); throw err }
  }
  const keep = (codes: Map<number, string>, into: Answer[]) => (i: number, at: number, us: number): void => {
    into.push({ at, us, code: codes.get(i) ?? 'unknown' })
    codes.delete(i)
  }

  // Warm-up, not recorded: half at a gentle rate (a cold system: JIT, pools), half at the full rates.
  let w = 1e9
  for (const [cr, tr] of [[Math.min(P.cardRate, 100), Math.min(P.taxRate, 20)], [P.cardRate, P.taxRate]] as const) {
    await Promise.all([
      runOpenLoop({ rate: cr, durationMs: P.warmupS * 500, send: () => card(w++).catch(() => 0) }),
      runOpenLoop({ rate: tr, durationMs: P.warmupS * 500, send: () => tax(w++).catch(() => 0) }),
    ])
  }
  cardCodes.clear(); taxCodes.clear()

  // RSS, the tax process and card-auth's event loop, sampled every 0.5 s through the run.
  const samples: Sample[] = []
  let sampling = true
  const sampler = (async () => {
    let n = 0
    while (sampling) {
      const pids = sys.pids()
      const s: Sample = {
        at: performance.now(),
        rss: pids.reduce((x, p) => x + rssOf(p), 0),
        processes: pids.length,
        taxPid: sys.taxPid(),
      }
      // prom-client resets its event-loop histogram at each scrape: one a second.
      if (n++ % 2 === 0) {
        try {
          const r = await request(`${sys.cardAuthUrl()}/metrics`, { signal: AbortSignal.timeout(2_000) })
          const text = await r.body.text()
          s.loopP99 = metric(text, 'nodejs_eventloop_lag_p99_seconds'); s.loopMax = metric(text, 'nodejs_eventloop_lag_max_seconds')
        } catch { /* a process too busy to answer in 2 s, or down: its lag shows in the next scrape */ }
      }
      samples.push(s)
      await sleep(500)
    }
  })()

  const segment = P.baselineS + P.faultS + P.recoveryS
  const t0 = performance.now()
  const marks: Array<{ from: number, on: number, off: number, to: number }> = []
  const timeline = (async () => {
    for (const [k, f] of faults.entries()) {
      const from = t0 + k * segment * 1000
      await sleep(from + P.baselineS * 1000 - performance.now())
      await hook(f, true)
      const on = performance.now()
      console.log(`  ${topology}: ${f} on at ${((on - t0) / 1000).toFixed(1)} s`)
      await sleep(on + P.faultS * 1000 - performance.now())
      await hook(f, false)
      marks.push({ from, on, off: performance.now(), to: from + segment * 1000 })
    }
  })()
  const total = faults.length * segment * 1000
  await Promise.all([
    runOpenLoop({ rate: P.cardRate, durationMs: total, send: card, onResult: keep(cardCodes, cards) }),
    runOpenLoop({ rate: P.taxRate, durationMs: total, send: tax, onResult: keep(taxCodes, taxes) }),
    timeline,
  ])
  sampling = false
  await sampler
  await Promise.allSettled([cardPool.destroy(), taxPool.destroy()])
  return faults.map((fault, k) => row(topology, fault, marks[k]!, cards, taxes, samples, sys.restarts, P))
}

function row (
  topology: Topology,
  fault: FaultName,
  m: { from: number, on: number, off: number, to: number },
  cards: Answer[],
  taxes: Answer[],
  samples: Sample[],
  restarts: number[],
  P: Params
): Row {
  const within = <T extends { at: number }>(xs: T[], a: number, b: number): T[] => xs.filter(x => x.at >= a && x.at < b)
  const count = (xs: Answer[]): Record<string, number> => {
    const o: Record<string, number> = {}
    for (const x of xs) o[x.code] = (o[x.code] ?? 0) + 1
    return o
  }
  const hist = (xs: Answer[]) => {
    const h = newHistogram()
    for (const x of xs) h.recordValue(x.us)
    return summary(h)
  }
  const inFault = within(cards, m.on, m.off)
  const s = hist(inFault)
  // Recovered: the first of 3 consecutive seconds in which card-auth answered every
  // request 201 within the SLA, and tax answered every quote from the provider.
  const from = fault === 'crash' ? m.on : m.off
  const recovered = (good: (xs: Answer[]) => boolean, xs: Answer[]): number | null => {
    const secs = Math.floor((m.to - from) / 1000)
    const ok = Array.from({ length: secs }, (_x, i) => good(within(xs, from + i * 1000, from + (i + 1) * 1000)))
    const i = ok.findIndex((_x, j) => j + 3 <= secs && ok[j] && ok[j + 1] && ok[j + 2])
    return i < 0 ? null : i
  }
  const cardGood = (xs: Answer[]): boolean => xs.length > 0 && xs.every(x => x.code === '201') && hist(xs).p99Ms <= P.slaMs
  const taxGood = (xs: Answer[]): boolean => xs.length > 0 && xs.every(x => x.code === '200 provider')
  const seg = within(samples, m.from, m.to)
  const peak = seg.reduce((a, x) => x.rss > a.rss ? x : a, { rss: 0, processes: 0 })
  const pids = new Set(seg.map(x => x.taxPid).filter(p => p !== undefined))
  const loop = within(samples, m.on, m.off)
  const mx = (xs: Array<number | undefined>): number | null => {
    const v = xs.filter((x): x is number => x !== undefined)
    return v.length ? Math.round(Math.max(...v) * 10) / 10 : null
  }
  return {
    topology,
    fault,
    card: {
      ...s,
      errorRate: s.count ? 1 - inFault.filter(x => x.code === '201').length / s.count : 1,
      answers: count(inFault),
    },
    baselineCardP99Ms: hist(within(cards, m.from, m.on)).p99Ms,
    recoveredS: { card: recovered(cardGood, cards), tax: recovered(taxGood, taxes) },
    tax: count(within(taxes, m.on, m.off)),
    peakRssMb: Math.round(peak.rss / 1e5) / 10,
    processes: peak.processes,
    taxRestarts: Math.max(pids.size - 1, restarts.filter(t => t >= m.from && t < m.to).length),
    eventLoop: { p99Ms: mx(loop.map(x => x.loopP99)), maxMs: mx(loop.map(x => x.loopMax)) },
    taxAfter: count(within(taxes, m.off, m.to)),
    perSecond: Array.from({ length: Math.floor((m.to - m.from) / 1000) }, (_x, i) => {
      const c = within(cards, m.from + i * 1000, m.from + (i + 1) * 1000)
      return {
        s: i,
        cardP99Ms: c.length ? hist(c).p99Ms : null,
        cardNot201: c.filter(x => x.code !== '201').length,
        taxNotProvider: within(taxes, m.from + i * 1000, m.from + (i + 1) * 1000).filter(x => x.code !== '200 provider').length,
      }
    }),
  }
}
