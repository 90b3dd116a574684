// The deck's view of the fleet: every process is polled on its own, in
// parallel, with a short deadline, so one hung lane costs the page at most that
// deadline and never another lane's tile. Lanes answer GET /status (state,
// permits, queue, pool, rejections by reason, last-minute p50/p99 from their
// sliding-window summary); the gateway its /status (each lane's replicas as it
// balances them); other processes answer /health/live. The collector
// keeps a ring of samples for the timeline, so the page can draw the last
// minutes without Prometheus.
import type { Agent } from 'undici'
import { createHttpAgent } from '../../shared/lane-kit/http.ts'

export type TargetKind = 'lane' | 'gateway' | 'worker' | 'sandbox'
export interface Target { name: string, kind: TargetKind, url: string }

export interface LaneStatus {
  lane: string
  priority: string
  state: string
  permits: number
  active: number
  queue: { depth: number, capacity: number, waitBudgetMs: number }
  pool: { total: number, idle: number, waiting: number, max: number }
  rejections: Record<string, number>
  latency: { windowSeconds: number, p50Ms: number | null, p99Ms: number | null }
  /** The lane's outbound dependencies' circuit breakers (shared/breaker.ts). */
  breakers?: Array<{ dependency: string, state: 'closed' | 'open' | 'half_open', since: string }>
  pid: number
  rssBytes: number
}

/** A lane replica as the gateway balances it (the gateway's GET /status). */
export interface ReplicaView { address: string, state: string, inflight: number, requests: number, ejections: number }

export interface TargetSnapshot {
  name: string
  kind: TargetKind
  url: string
  up: boolean
  /** Why it is down: `timeout`, `refused`, `http 503`, ... */
  error: string | null
  checkedAt: string
  /** How long the poll took (ms). */
  pollMs: number
  /** Lanes only. */
  status: LaneStatus | null
  /** Rejections per second since the previous poll; null across a restart or before two polls. */
  rejectionsPerSecond: number | null
  /** The process's resident set size at the poll (bytes), as it reported it. */
  rssBytes: number | null
  /**
   * Lanes only: the last status the lane did answer, and when that poll began. Kept
   * while it is down, so a lane that is slow rather than gone (a P2 lane starved of
   * CPU misses the poll's deadline) still shows where it was.
   */
  lastSeen: { at: string, state: string, active: number, permits: number } | null
  /** The gateway only: each lane's replicas as it balances them. */
  replicas?: Record<string, ReplicaView[]>
}

export interface TimelinePoint {
  t: number
  lanes: Record<string, {
    up: boolean, state: string | null, active: number | null, p99Ms: number | null, rejectionsPerSecond: number | null
  }>
}

export interface CollectorOptions {
  targets: Target[]
  pollMs: number
  timeoutMs: number
  historySeconds: number
}

const sumRejections = (s: LaneStatus): number => Object.values(s.rejections).reduce((a, b) => a + b, 0)

export class Collector {
  readonly targets: readonly Target[]
  readonly pollMs: number
  readonly #timeoutMs: number
  readonly #capacity: number
  readonly #agent: Agent
  #latest = new Map<string, TargetSnapshot>()
  #lastSeen = new Map<string, NonNullable<TargetSnapshot['lastSeen']>>()
  #prev = new Map<string, { at: number, pid: number, total: number }>()
  #history: TimelinePoint[] = []
  #timer: NodeJS.Timeout | undefined
  #running = false

  constructor (opts: CollectorOptions) {
    this.targets = Object.freeze([...opts.targets])
    this.pollMs = opts.pollMs
    this.#timeoutMs = opts.timeoutMs
    this.#capacity = Math.max(1, Math.ceil(opts.historySeconds * 1000 / opts.pollMs))
    // Few sockets per target: the deck is one reader, and a hung lane's socket is destroyed on abort.
    this.#agent = createHttpAgent({ connections: 4, timeoutMs: opts.timeoutMs })
  }

  start (): void {
    if (this.#timer) return
    const loop = async (): Promise<void> => {
      const began = Date.now()
      await this.poll().catch(() => {})
      const wait = Math.max(0, this.pollMs - (Date.now() - began))
      if (this.#timer !== undefined) this.#timer = setTimeout(() => { void loop() }, wait)
    }
    this.#timer = setTimeout(() => { void loop() }, 0)
  }

  async stop (): Promise<void> {
    clearTimeout(this.#timer)
    this.#timer = undefined
    await this.#agent.close()
  }

  /** One round over every target; each has its own deadline, so the round takes at most one deadline. */
  async poll (): Promise<void> {
    if (this.#running) return
    this.#running = true
    try {
      const snaps = await Promise.all(this.targets.map(t => this.#probe(t)))
      for (const s of snaps) this.#latest.set(s.name, s)
      const point: TimelinePoint = { t: Date.now(), lanes: {} }
      for (const s of snaps.filter(x => x.kind === 'lane')) {
        point.lanes[s.name] = {
          up: s.up,
          state: s.status?.state ?? null,
          active: s.status?.active ?? null,
          p99Ms: s.status?.latency.p99Ms ?? null,
          rejectionsPerSecond: s.rejectionsPerSecond,
        }
      }
      this.#history.push(point)
      if (this.#history.length > this.#capacity) this.#history.splice(0, this.#history.length - this.#capacity)
    } finally {
      this.#running = false
    }
  }

  snapshot (): TargetSnapshot[] {
    return this.targets.map(t => this.#latest.get(t.name) ?? { name: t.name, kind: t.kind, url: t.url, up: false, error: 'not polled yet', checkedAt: new Date(0).toISOString(), pollMs: 0, status: null, rejectionsPerSecond: null, rssBytes: null, lastSeen: null })
  }

  timeline (seconds: number): TimelinePoint[] {
    const since = Date.now() - seconds * 1000
    return this.#history.filter(p => p.t >= since)
  }

  async #probe (t: Target): Promise<TargetSnapshot> {
    const started = performance.now()
    const checkedAt = new Date().toISOString()
    const base = { name: t.name, kind: t.kind, url: t.url, checkedAt, lastSeen: this.#lastSeen.get(t.name) ?? null }
    try {
      const res = await this.#agent.request({
        origin: t.url,
        path: t.kind === 'lane' || t.kind === 'gateway' ? '/status' : '/health/live',
        method: 'GET',
        signal: AbortSignal.timeout(this.#timeoutMs),
        headers: { accept: 'application/json' },
      })
      const body = await res.body.json().catch(() => null) as LaneStatus | null
      const pollMs = performance.now() - started
      const rssBytes = typeof body?.rssBytes === 'number' ? body.rssBytes : null
      if (res.statusCode !== 200) return { ...base, up: false, error: `http ${res.statusCode}`, pollMs, status: null, rejectionsPerSecond: null, rssBytes: null }
      if (t.kind === 'gateway') return { ...base, up: true, error: null, pollMs, status: null, rejectionsPerSecond: null, rssBytes, replicas: (body as unknown as { lanes?: Record<string, ReplicaView[]> } | null)?.lanes ?? {} }
      if (t.kind !== 'lane') return { ...base, up: true, error: null, pollMs, status: null, rejectionsPerSecond: null, rssBytes }
      if (!body || typeof body.state !== 'string') return { ...base, up: false, error: 'bad status body', pollMs, status: null, rejectionsPerSecond: null, rssBytes }
      const lastSeen = { at: checkedAt, state: body.state, active: body.active, permits: body.permits }
      this.#lastSeen.set(t.name, lastSeen)
      const rejectionsPerSecond = this.#rate(t.name, body)
      return { ...base, lastSeen, up: true, error: null, pollMs, status: body, rejectionsPerSecond, rssBytes }
    } catch (err) {
      this.#prev.delete(t.name)
      const pollMs = performance.now() - started
      const error = describe(err)
      return { ...base, up: false, error, pollMs, status: null, rejectionsPerSecond: null, rssBytes: null }
    }
  }

  #rate (name: string, s: LaneStatus): number | null {
    const now = performance.now()
    const total = sumRejections(s)
    const prev = this.#prev.get(name)
    this.#prev.set(name, { at: now, pid: s.pid, total })
    // A new pid or a smaller total means the lane restarted: its counters began again.
    if (!prev || prev.pid !== s.pid || total < prev.total) return null
    const dt = (now - prev.at) / 1000
    return dt > 0 ? Math.round((total - prev.total) / dt * 10) / 10 : null
  }
}

function describe (err: unknown): string {
  const e = err as { name?: string, code?: string, cause?: { code?: string } }
  if (e.name === 'TimeoutError' || e.code === 'UND_ERR_HEADERS_TIMEOUT' || e.code === 'UND_ERR_BODY_TIMEOUT' || e.code === 'UND_ERR_CONNECT_TIMEOUT') return 'timeout'
  const code = e.code ?? e.cause?.code
  if (code === 'ECONNREFUSED') return 'refused'
  return code ?? (err as Error).message ?? 'unreachable'
}
