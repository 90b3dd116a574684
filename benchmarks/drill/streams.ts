// The three load streams through the gateway, each counting its own answers:
// card authorizations and tax quotes in open loop at their fixed rates (latency
// from each request's scheduled send time), and the INC-4491 client that
// re-sends one tax quote every 50 ms during the fault.
import type * as hdr from 'hdr-histogram-js'
import { loadCardToken } from '../../services/card-auth/seed.ts'
import { newHistogram } from '../open-loop.ts'
import { serverTiming, sleep } from '../run-info.ts'
import type { DrillClients } from './clients.ts'
import { perSecond, slotOf, type Clock, type Phase, type PhaseTimeline } from './timeline.ts'

/** What every stream sends with and counts against. */
export interface StreamContext { clients: DrillClients, runId: string, clock: Clock, timeline: PhaseTimeline }

export const cardBody = (i: number) => ({
  merchantId: 'm_drill',
  cardToken: loadCardToken(i),
  amount: { value: 1, currency: 'EUR' },
})

const count = (codes: Record<string, number>, code: string): void => { codes[code] = (codes[code] ?? 0) + 1 }

export interface CardSecond { h: hdr.Histogram, ok: number, r429: number, err: number }

export class CardStream {
  readonly byPhase: Record<Phase, hdr.Histogram> = {
    baseline: newHistogram(),
    fault: newHistogram(),
    recovery: newHistogram(),
  }

  readonly perSecond: CardSecond[]
  readonly acknowledged = new Map<string, string>() // key -> authorization id
  readonly refused = new Set<string>() // keys answered with a refusal (must not be in the database)
  /** Codes of the answers other than 201. */
  readonly codes: Record<string, number> = {}
  errors = 0
  readonly #x: StreamContext
  readonly #info = new Map<number, { code?: string }>()

  constructor (x: StreamContext) {
    this.#x = x
    this.perSecond = perSecond(x.timeline, () => ({ h: newHistogram(), ok: 0, r429: 0, err: 0 }))
  }

  key (i: number): string { return `drill-${this.#x.runId}-c-${i}` }

  readonly send = async (i: number): Promise<number> => {
    const key = this.key(i)
    const r = await this.#x.clients.post(this.#x.clients.cardPool, '/v1/authorizations', key, cardBody(i))
    const json = await r.body.json().catch(() => ({})) as { id?: string, code?: string }
    if (r.statusCode === 201 && json.id) this.acknowledged.set(key, json.id)
    else { this.refused.add(key); this.#info.set(i, { code: json.code }) }
    return r.statusCode
  }

  readonly onResult = (i: number, scheduled: number, us: number, status: string): void => {
    const s = this.#x.clock.since(scheduled)
    const sec = this.perSecond[slotOf(this.#x.timeline, s)]!
    sec.h.recordValue(us)
    const code = this.#info.get(i)?.code ?? status
    this.#info.delete(i)
    if (status === '201') sec.ok++
    else if (status === '429') { sec.r429++; count(this.codes, code) } else {
      sec.err++
      this.errors++
      count(this.codes, code)
      if (status === 'error') this.refused.delete(this.key(i))
    }
    this.byPhase[this.#x.timeline.phaseOf(s)].recordValue(us)
  }
}

export interface TaxSecond { h: hdr.Histogram, ok: number, shed: number, compensated: number, err: number }

const isShed = (status: number, compensated: string | null, code?: string): boolean =>
  compensated === 'saturated' || (status === 503 && code === 'ERR_TAX_BULKHEAD_SATURATED')

export class TaxStream {
  readonly perSecond: TaxSecond[]
  // MC-RT-01's "time to shed tax load (< 5 ms per rejected request)": each shed
  // answer as the client sees it, from its scheduled send to its answer (through
  // the gateway); the lane's own decision (Server-Timing admit), its whole
  // answer, the commit included (Server-Timing answer), and the gateway's
  // (Server-Timing gateway: arrival there to the answer ready) beside it. A
  // fleet the drill did not start shows them with GATEWAY_SERVER_TIMING=on.
  readonly shedClient = newHistogram()
  readonly shedLane = newHistogram()
  readonly shedAnswer = newHistogram()
  readonly shedGateway = newHistogram()
  /** Shed answers the client saw in under 5 ms. */
  shedUnder = 0
  /** Every answer by its code, `compensated:<why>` or status. */
  readonly codes: Record<string, number> = {}
  errors = 0
  shed = 0
  readonly #x: StreamContext
  readonly #info = new Map<number, { shed: boolean, compensated: string | null, code?: string }>()

  constructor (x: StreamContext) {
    this.#x = x
    this.perSecond = perSecond(x.timeline, () => ({ h: newHistogram(), ok: 0, shed: 0, compensated: 0, err: 0 }))
  }

  readonly send = async (i: number): Promise<number> => {
    const r = await this.#x.clients.post(this.#x.clients.taxPool, '/v1/tax/quotes', `drill-${this.#x.runId}-t-${i}`, {
      jurisdiction: ['US-CA', 'US-NY', 'DE', 'FR', 'GB'][i % 5],
      amount: { value: 10_000, currency: 'EUR' },
    })
    const json = await r.body.json().catch(() => ({})) as { code?: string }
    const compensated = (r.headers['x-tax-compensation'] as string | undefined) ?? null
    const shed = isShed(r.statusCode, compensated, json.code)
    if (shed) this.#timeShed(r.headers['server-timing'])
    this.#info.set(i, { shed, compensated, code: json.code })
    return r.statusCode
  }

  #timeShed (header: unknown): void {
    for (const [name, h] of [['admit', this.shedLane], ['answer', this.shedAnswer], ['gateway', this.shedGateway]] as const) {
      const ms = serverTiming(header, name)
      if (ms !== null) h.recordValue(Math.max(1, Math.round(ms * 1000)))
    }
  }

  readonly onResult = (i: number, scheduled: number, us: number, status: string): void => {
    const sec = this.perSecond[slotOf(this.#x.timeline, this.#x.clock.since(scheduled))]!
    const info = this.#info.get(i) ?? { shed: false, compensated: null }
    this.#info.delete(i)
    sec.h.recordValue(us)
    count(this.codes, info.code ?? (info.compensated ? `compensated:${info.compensated}` : status))
    if (info.shed) { sec.shed++; this.shed++; if (us < 5_000) this.shedUnder++; this.shedClient.recordValue(us) }
    if (info.compensated) sec.compensated++
    if (status === '200' || status === '429' || info.shed) sec.ok++
    else { sec.err++; this.errors++ }
  }

  /** The seconds of the fault's window. */
  #inFault (): TaxSecond[] {
    const t = this.#x.timeline
    return this.perSecond.slice(Math.floor(t.faultFrom), Math.ceil(t.faultTo))
  }

  /** Tax answers during the fault, in one histogram. */
  faultHistogram (): hdr.Histogram {
    return this.#inFault().reduce((h, x) => { h.add(x.h); return h }, newHistogram())
  }

  /** Tax answers during the fault that were not the provider's: errors, shed, compensated. */
  degradedInFault (): number {
    return this.#inFault().reduce((x, t) => x + t.err + t.shed + t.compensated, 0)
  }
}

export interface StormSecond { sent: number, blocked: number }

/** INC-4491: the same quote re-sent every 50 ms, no backoff, no jitter. */
export class RetryingClients {
  readonly perSecond: StormSecond[]
  readonly codes: Record<string, number> = {}
  errors = 0
  /** Per client: attempts of its key that reached the lane in its busiest 10 s. */
  readonly reachedPerKey: number[] = []
  readonly #x: StreamContext
  readonly #intervalMs: number

  constructor (x: StreamContext, intervalMs: number) {
    this.#x = x
    this.#intervalMs = intervalMs
    this.perSecond = perSecond(x.timeline, () => ({ sent: 0, blocked: 0 }))
  }

  /** Client j, from the fault's start to its end. */
  async run (j: number): Promise<void> {
    const { clock, timeline } = this.#x
    await clock.until(timeline.faultFrom)
    const key = `drill-${this.#x.runId}-s-${j}`
    const reached: number[] = []
    while (clock.at() < timeline.faultTo) {
      const at = await this.#attempt(key)
      if (at !== null) reached.push(at)
      await sleep(this.#intervalMs)
    }
    // ADV-IR-01: at most 4 attempts of one key in ANY 10 s window (the busiest one counts).
    this.reachedPerKey[j] = Math.max(0, ...reached.map(s0 => reached.filter(x => x >= s0 && x < s0 + 10).length))
  }

  /** One attempt; when it reached the tax lane (s), or null. */
  async #attempt (key: string): Promise<number | null> {
    const { clients, clock, timeline } = this.#x
    const sec = this.perSecond[slotOf(timeline, clock.at())]!
    sec.sent++
    try {
      const r = await clients.post(clients.stormPool, '/v1/tax/quotes', key, {
        jurisdiction: 'US-CA',
        amount: { value: 5_000, currency: 'USD' },
      })
      const json = await r.body.json().catch(() => ({})) as { code?: string }
      count(this.codes, json.code ?? String(r.statusCode))
      if (r.statusCode === 429 && json.code === 'ERR_RETRY_STORM_BLOCKED') sec.blocked++
      // Answered by the tax lane: a quote (provider, compensated or replayed) or its shed 503.
      else if (r.statusCode === 200 || json.code === 'ERR_TAX_BULKHEAD_SATURATED') return clock.at()
      // Refused by the gateway itself for another reason: a 429 is designed, anything else is an error.
      else if (r.statusCode !== 429) this.errors++
    } catch { this.errors++; count(this.codes, 'error') }
    return null
  }
}
