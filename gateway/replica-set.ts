// A lane's replicas as the gateway sees them: found by name (re-resolved, as
// Compose's DNS and a Kubernetes headless Service give them) or listed, each
// with its own undici Pool, checked on its /health/ready, ejected for a bounded
// time when it fails at the transport, and chosen by least outstanding requests
// with a new replica's share ramped up over the slow-start window.
//
// Why not undici's BalancedPool: it balances by weighted round robin, does no
// health checks, and lowers a weight on errors of any kind, 5xx included; a
// lane's own 429 or bulkhead 503 means busy, never down, and must eject nothing.
import dns from 'node:dns/promises'
import net from 'node:net'
import type { Pool } from 'undici'
import { createOriginPool, probeReady } from '../shared/lane-kit/http.ts'

export interface ReplicaSetOptions {
  lane: string
  /** One URL or a comma-separated list; a host name stands for every address it resolves to. */
  url: string
  /** Requests in flight to one replica at most (its pool's connections). */
  cap: number
  pool: { timeoutMs: number, connectTimeoutMs: number, maxResponseBytes: number }
  /** How often names are resolved again and replicas checked (ms). */
  resolveEveryMs: number
  checkEveryMs: number
  /** A replica that failed at the transport sits out this long, doubled per failure in a row, up to ejectMaxMs. */
  ejectMs: number
  ejectMaxMs: number
  /** A replica newly ready gets its full share over this long (ms). */
  slowStartMs: number
  lookup?: (host: string) => Promise<string[]>
  now?: () => number
  onChange?: (r: Replica, what: string) => void
}

export type ReplicaState = 'ready' | 'unready' | 'gone'

export interface Replica {
  readonly address: string
  readonly origin: string
  readonly pool: Pool
  inflight: number
  state: ReplicaState
  /** When it last became ready (the slow start counts from there). */
  readySince: number
  ejectedUntil: number
  failuresInRow: number
  requests: number
  ejections: number
}

const defaultLookup = async (host: string): Promise<string[]> =>
  (await dns.lookup(host, { all: true })).map(a => a.address)

interface Target { protocol: string, host: string, port: string }

function targetsOf (url: string): Target[] {
  return url.split(',').map(s => s.trim()).filter(Boolean).map(s => {
    const u = new URL(s)
    return { protocol: u.protocol, host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port || (u.protocol === 'https:' ? '443' : '80') }
  })
}

// `localhost` and address literals are taken as they are: `localhost` may also
// resolve to ::1, where a lane listening on 127.0.0.1 is not.
const literal = (host: string): string | undefined => host === 'localhost' ? '127.0.0.1' : net.isIP(host) ? host : undefined
const originOf = (t: Target, address: string): string => `${t.protocol}//${net.isIPv6(address) ? `[${address}]` : address}:${t.port}`

export class ReplicaSet {
  readonly lane: string
  readonly #o: ReplicaSetOptions
  readonly #targets: Target[]
  readonly #now: () => number
  readonly #lookup: (host: string) => Promise<string[]>
  #replicas = new Map<string, Replica>()
  #timers: NodeJS.Timeout[] = []
  #lastResolveError: string | undefined
  #closed = false

  constructor (o: ReplicaSetOptions) {
    this.lane = o.lane
    this.#o = o
    this.#targets = targetsOf(o.url)
    this.#now = o.now ?? Date.now
    this.#lookup = o.lookup ?? defaultLookup
    // Literals are known at once; names once resolved (start()).
    for (const t of this.#targets) {
      const a = literal(t.host)
      if (a) this.#add(originOf(t, a), true)
    }
  }

  /** Resolves the names and checks every replica now, then on their intervals. */
  async start (): Promise<void> {
    await this.resolve()
    await this.check()
    this.#timers.push(
      setInterval(() => { void this.resolve() }, this.#o.resolveEveryMs),
      setInterval(() => { void this.check() }, this.#o.checkEveryMs))
    for (const t of this.#timers) t.unref()
  }

  get replicas (): Replica[] { return [...this.#replicas.values()] }
  get inflight (): number { let n = 0; for (const r of this.#replicas.values()) n += r.inflight; return n }
  get resolveError (): string | undefined { return this.#lastResolveError }

  /**
   * Re-resolves the names: new addresses are added (unready until checked),
   * vanished ones drained. A failed lookup keeps what was known.
   */
  async resolve (): Promise<void> {
    const names = this.#targets.filter(t => !literal(t.host))
    if (names.length === 0 || this.#closed) return
    const seen = new Set<string>()
    for (const t of names) {
      try {
        for (const a of await this.#lookup(t.host)) seen.add(originOf(t, a))
      } catch (err) {
        this.#lastResolveError = `${t.host}: ${(err as { code?: string }).code ?? (err as Error).message}`
        return
      }
    }
    this.#lastResolveError = undefined
    for (const origin of seen) if (!this.#replicas.has(origin)) this.#add(origin, false)
    for (const [origin, r] of this.#replicas) if (!seen.has(origin)) this.#drop(r)
  }

  /** Asks each replica's /health/ready (on a connection of its own, so a busy pool does not fail the check). */
  async check (): Promise<void> {
    await Promise.all(this.replicas.map(async r => {
      const ok = await probeReady(r.origin, Math.min(1_000, this.#o.checkEveryMs))
      if (this.#closed || r.state === 'gone') return
      if (ok && r.state !== 'ready') { r.state = 'ready'; r.readySince = this.#now(); this.#o.onChange?.(r, 'ready') }
      if (!ok && r.state === 'ready') { r.state = 'unready'; this.#o.onChange?.(r, 'unready') }
    }))
  }

  /**
   * The replica for the next request: least outstanding requests, each weighted
   * by its slow-start share, among those ready, not ejected and under their cap.
   * When none is ready and in rotation, every replica under its cap is a
   * candidate (a lone lane that says it is unready still answers for itself,
   * with its own 503, as it did before there were replicas). Undefined: every
   * replica is at its cap, or none is known.
   */
  pick (exclude?: Replica): Replica | undefined {
    const now = this.#now()
    let best: Replica | undefined
    let bestScore = Infinity
    let any: Replica | undefined
    let anyScore = Infinity
    for (const r of this.#replicas.values()) {
      if (r === exclude || r.state === 'gone' || r.inflight >= this.#o.cap) continue
      const score = (r.inflight + 1) / this.#weight(r, now)
      // Ties go to a random one of them, so equal replicas share evenly.
      const jitter = Math.random() * 1e-6
      if (r.state === 'ready' && now >= r.ejectedUntil) {
        if (score + jitter < bestScore) { best = r; bestScore = score + jitter }
      } else if (r.inflight + jitter < anyScore) { any = r; anyScore = r.inflight + jitter }
    }
    return best ?? (this.#inRotation(now) ? undefined : any)
  }

  /**
   * A request to `r` failed at the transport: it sits out, longer for each
   * failure in a row. The other requests that were in flight on it when it
   * failed fail too; they do not count again while it is out.
   */
  failed (r: Replica): void {
    if (this.#now() < r.ejectedUntil) return
    r.failuresInRow++
    r.ejections++
    r.ejectedUntil = this.#now() + Math.min(this.#o.ejectMaxMs, this.#o.ejectMs * 2 ** (r.failuresInRow - 1))
    this.#o.onChange?.(r, 'ejected')
  }

  /** `r` answered (any status: a lane's own 429 or 503 is an answer). */
  answered (r: Replica): void {
    r.failuresInRow = 0
  }

  async close (): Promise<void> {
    this.#closed = true
    for (const t of this.#timers) clearInterval(t)
    await Promise.all(this.replicas.map(r => r.pool.close().catch(() => r.pool.destroy())))
  }

  #inRotation (now: number): boolean {
    for (const r of this.#replicas.values()) if (r.state === 'ready' && now >= r.ejectedUntil) return true
    return false
  }

  #weight (r: Replica, now: number): number {
    if (r.readySince === 0 || this.#o.slowStartMs <= 0) return 1
    return Math.min(1, Math.max(0.1, (now - r.readySince) / this.#o.slowStartMs))
  }

  #add (origin: string, ready: boolean): void {
    const p = this.#o.pool
    const r: Replica = {
      address: origin.replace(/^https?:\/\//, ''),
      origin,
      pool: createOriginPool(origin, {
        connections: this.#o.cap,
        timeoutMs: p.timeoutMs,
        connectTimeoutMs: p.connectTimeoutMs,
        maxResponseBytes: p.maxResponseBytes,
      }),
      inflight: 0,
      // A listed address is presumed ready until its first check says otherwise;
      // one found by name waits for its check (it may be a replica still starting).
      state: ready ? 'ready' : 'unready',
      readySince: 0,
      ejectedUntil: 0,
      failuresInRow: 0,
      requests: 0,
      ejections: 0,
    }
    this.#replicas.set(origin, r)
    this.#o.onChange?.(r, 'added')
  }

  // A replica no longer in DNS takes no new requests; its pool closes once
  // what is in flight on it has been answered.
  #drop (r: Replica): void {
    r.state = 'gone'
    this.#replicas.delete(r.origin)
    this.#o.onChange?.(r, 'gone')
    r.pool.close().catch(() => r.pool.destroy())
  }
}
