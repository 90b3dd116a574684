// Group commit for the writes a lane makes on a shed answer (a compensated tax
// quote and its reconcile job, a queued fraud screening and its job). Those
// answers must be durable before they are sent, and must not wait on the lane's
// pool one request at a time: a burst of them used to take a pool connection
// each, waiting up to 250 ms for one, and some were refused for want of one.
// Here they go to one connection reserved for it (counted in the role's
// CONNECTION LIMIT, taken off the lane's pool), and everything that arrives
// while a commit is in flight, or in the same turn of the event loop as the
// first write, goes into the next one: one commit (one WAL flush,
// synchronous_commit stays on) per batch, never a wait for a connection. A batch
// is written by one statement in autocommit, atomic and durable when it returns,
// so the answers wait for one round trip, not three (BEGIN, the write, COMMIT);
// `write` may read afterwards (the replays of taken keys), never write again.
// With `delayMs` (card-auth's authorizations), once the last batch held
// `delayFrom` items or more (4: writes overlap, the load is real), the next
// waits until its oldest item has waited `delayMs`, so more go together:
// PostgreSQL's commit_delay and commit_siblings, taken in the lane. Each answer
// may wait up to `delayMs` longer; in exchange a commit, a backend wake-up and a
// burst of answers serve more requests, and every process on the path (the
// gateway, the lane, the backend) wakes less often per request. At a low rate
// batches stay small and nothing waits.
// Bounded everywhere: at most `maxPending` waiting (beyond, submit refuses at
// once), at most `maxBatch` per commit, and a batch that takes longer than
// `timeoutMs` loses its connection (a hung server cannot hold the writer) and
// fails every item in it; the next batch opens a new connection. An item may
// carry its caller's stop (a Cancellation or an AbortSignal): aborted while waiting, it leaves the queue;
// aborted in flight, its caller stops waiting, and a batch whose every item was
// aborted loses its connection too, so the server cancels the statement (a
// deadline must free what the request held, as a pool connection's does).
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { cancellationOf, type Cancellation } from '../cancellation.ts'
import { destroySocket } from './destroy-socket.ts'
import { contextOf, failed, openSpan, type Context, type Span } from '../tracing.ts'

export interface GroupCommitOptions<I, O> {
  name: string
  /** The writer connection's application_name: its process's, as its pool's (watertight-<lane>). */
  applicationName: string
  databaseUrl: string
  /**
   * Writes a batch with ONE writing statement (autocommit: atomic, durable on
   * return), reads after it if it must; one output per input, in order.
   */
  write (client: pg.Client, items: readonly I[]): Promise<O[]>
  /**
   * Once the last batch held `delayFrom` items or more, hold the next until its
   * oldest item has waited this long (ms); 0: the next turn of the event loop.
   */
  delayMs?: number
  delayFrom?: number
  maxBatch?: number
  maxPending?: number
  timeoutMs?: number
  log: { warn (o: object, m: string): void }
  /**
   * Whether an item is a rehearsal (a warm-up's, lane-kit/warm-up.ts): such
   * items are batched only with each other, and their batch runs inside a
   * transaction that is rolled back, so the same code and statement run and
   * nothing is written.
   */
  rehearsal? (item: I): boolean
}

/** A shed answer written by a batch, keyed by its client's Idempotency-Key. */
export interface KeyedAnswer<R> { clientId: string, key: string, fingerprint: string, response: R }
export interface StoredAnswer<R> { fingerprint: string, response: R, inserted: boolean }

/**
 * Each item's stored answer after a batch insert (`inserted[i]`: the batch wrote
 * it): its own, or, when its key was taken, the earlier row's, read with
 * `takenSql` ($1 client ids, $2 keys; returns client_id, idempotency_key,
 * fingerprint, response) — a duplicate written earlier in the same batch included.
 */
export async function withReplays<R> (
  c: pg.Client, items: ReadonlyArray<KeyedAnswer<R>>, inserted: readonly boolean[], takenSql: string
): Promise<Array<StoredAnswer<R>>> {
  const out = items.map((it, i) => ({ fingerprint: it.fingerprint, response: it.response, inserted: inserted[i]! }))
  const taken = items.filter((_it, i) => !inserted[i])
  if (taken.length === 0) return out
  const earlier = await c.query<{ client_id: string, idempotency_key: string, fingerprint: string, response: R }>(
    takenSql, [taken.map(t => t.clientId), taken.map(t => t.key)])
  const byKey = new Map(earlier.rows.map(e => [`${e.client_id}\u0000${e.idempotency_key}`, e]))
  items.forEach((it, i) => {
    if (inserted[i]) return
    const e = byKey.get(`${it.clientId}\u0000${it.key}`)!
    out[i] = { fingerprint: e.fingerprint, response: e.response, inserted: false }
  })
  return out
}

export class GroupCommitFull extends Error {
  constructor (name: string) { super(`${name}: too many writes waiting`); this.name = 'GroupCommitFull' }
}

interface Pending<I, O> {
  item: I
  resolve (o: O): void
  reject (e: unknown): void
  aborted?: boolean
  /** The caller's wait for its batch, when tracing is on. */
  span?: Span
}

export class GroupCommit<I, O> {
  readonly #o: Required<Omit<GroupCommitOptions<I, O>, 'log' | 'rehearsal'>> & Pick<GroupCommitOptions<I, O>, 'log' | 'rehearsal'>
  #queue: Array<Pending<I, O>> = []
  #client: pg.Client | undefined
  #connecting: Promise<pg.Client> | undefined
  #flushing = false
  #inflight: Array<Pending<I, O>> = []
  #closed = false
  /** When the oldest item waiting was queued (performance.now()), and how many the last batch held. */
  #oldestAt = 0
  #lastBatch = 0
  /** Batches committed and items written, for the lane's metrics. */
  readonly stats = { batches: 0, items: 0, failures: 0 }

  constructor (o: GroupCommitOptions<I, O>) {
    this.#o = { delayMs: 0, delayFrom: 4, maxBatch: 500, maxPending: 2_000, timeoutMs: 2_000, ...o }
  }

  get pending (): number { return this.#queue.length }

  /**
   * Resolves once the item is committed (with its output), rejects if its batch
   * failed or `stop` aborted first. `trace`: the caller's trace context, for
   * the span of its wait (and its batch's commit).
   */
  submit (item: I, stop?: Cancellation | AbortSignal, trace?: Context): Promise<O> {
    const signal = stop === undefined ? undefined : cancellationOf(stop)
    if (this.#closed) return Promise.reject(new Error(`${this.#o.name}: closed`))
    if (signal?.aborted) return Promise.reject(signal.reason)
    if (this.#queue.length >= this.#o.maxPending) return Promise.reject(new GroupCommitFull(this.#o.name))
    return new Promise<O>((resolve, reject) => {
      const p: Pending<I, O> = { item, resolve, reject }
      const span = openSpan(`${this.#o.name} wait`, { attributes: { 'watertight.writer': this.#o.name } }, trace)
      if (span) {
        p.span = span
        p.resolve = o => { span.end(); resolve(o) }
        p.reject = e => { failed(span, e); span.end(); reject(e) }
      }
      if (signal) {
        const done = p.resolve
        const fail = p.reject
        const off = signal.onAbort(reason => { this.#abandon(p, reason) })
        p.resolve = o => { off(); done(o) }
        p.reject = e => { off(); fail(e) }
      }
      if (this.#queue.length === 0) this.#oldestAt = performance.now()
      this.#queue.push(p)
      if (!this.#flushing) void this.#flush()
    })
  }

  /** How many items at the queue's head go in the next batch: up to maxBatch, rehearsals never with real writes. */
  #sameKind (): number {
    const n = Math.min(this.#queue.length, this.#o.maxBatch)
    const is = this.#o.rehearsal
    if (!is) return n
    const first = is(this.#queue[0]!.item)
    let i = 1
    while (i < n && is(this.#queue[i]!.item) === first) i++
    return i
  }

  #abandon (p: Pending<I, O>, reason: unknown): void {
    const queued = this.#queue.indexOf(p)
    if (queued >= 0) this.#queue.splice(queued, 1)
    else if (this.#inflight.includes(p)) {
      p.aborted = true
      if (this.#inflight.every(q => q.aborted) && this.#client) this.#drop(this.#client)
    }
    p.reject(reason)
  }

  async #flush (): Promise<void> {
    this.#flushing = true
    try {
      while (this.#queue.length > 0) {
        // One turn of the event loop first: the requests read in the same turn
        // (a burst, or the arrivals read while the last commit ran) go together;
        // under load (the last batch held delayFrom or more), until the oldest has waited delayMs.
        const wait = this.#lastBatch >= this.#o.delayFrom ? this.#o.delayMs - (performance.now() - this.#oldestAt) : 0
        await new Promise(resolve => wait >= 1 ? setTimeout(resolve, wait) : setImmediate(resolve))
        if (this.#queue.length === 0) break
        const batch = this.#queue.splice(0, this.#sameKind())
        this.#lastBatch = batch.length
        if (this.#queue.length > 0) this.#oldestAt = performance.now()
        this.#inflight = batch
        const span = this.#batchSpan(batch)
        try {
          const rehearsal = this.#o.rehearsal?.(batch[0]!.item) === true
          const out = await this.#commit(batch.map(p => p.item), rehearsal)
          span?.end()
          this.stats.batches++
          this.stats.items += batch.length
          batch.forEach((p, i) => p.resolve(out[i]!))
        } catch (err) {
          failed(span, err)
          span?.end()
          this.stats.failures++
          if (!batch.every(p => p.aborted)) this.#o.log.warn({ err, items: batch.length }, `${this.#o.name}: a batch failed`)
          for (const p of batch) p.reject(err)
        } finally {
          this.#inflight = []
        }
      }
    } finally {
      this.#flushing = false
    }
  }

  /**
   * One span for the batch's commit, when one of its callers is traced: a child
   * of the first traced caller's wait, linked from every caller's wait and
   * linking back to each (a request's trace shows the batch it joined).
   */
  #batchSpan (batch: ReadonlyArray<Pending<I, O>>): Span | undefined {
    const waits = batch.flatMap(p => p.span ? [p.span] : [])
    if (waits.length === 0) return undefined
    const span = openSpan(`${this.#o.name} commit`, {
      attributes: { 'watertight.writer': this.#o.name, 'watertight.batch.size': batch.length },
      links: waits.slice(1).map(w => ({ context: w.spanContext() })),
    }, contextOf(waits[0]!))
    if (!span) return undefined
    for (const w of waits) {
      w.setAttribute('watertight.batch.size', batch.length)
      if (w !== waits[0]) w.addLink({ context: span.spanContext() })
    }
    return span
  }

  /**
   * Opens the writer's connection before the first shed answer needs it (a cold
   * login costs that answer tens of ms).
   */
  warm (): void {
    this.#connection().catch(err => { this.#o.log.warn({ err }, `${this.#o.name}: writer connection not opened; the first batch opens it`) })
  }

  async #connection (): Promise<pg.Client> {
    if (this.#client) return this.#client
    this.#connecting ??= (async () => {
      const c = new pg.Client({ connectionString: this.#o.databaseUrl, application_name: this.#o.applicationName })
      c.on('error', err => { this.#o.log.warn({ err }, `${this.#o.name}: writer connection lost`); if (this.#client === c) this.#client = undefined })
      await c.connect()
      this.#client = c
      return c
    })().finally(() => { this.#connecting = undefined })
    return this.#connecting
  }

  async #commit (items: readonly I[], rehearsal: boolean): Promise<O[]> {
    let timer: NodeJS.Timeout | undefined
    let timedOut = false
    let client: pg.Client | undefined
    const work = (async () => {
      client = await this.#connection()
      if (!rehearsal) return await this.#o.write(client, items)
      await client.query('begin')
      try {
        return await this.#o.write(client, items)
      } finally {
        await client.query('rollback')
      }
    })()
    try {
      return await Promise.race([work, new Promise<never>((_resolve, reject) => {
        timer = setTimeout(() => { timedOut = true; reject(new Error(`${this.#o.name}: a batch took longer than ${this.#o.timeoutMs} ms`)) }, this.#o.timeoutMs)
      })])
    } catch (err) {
      // A batch that timed out may still commit on a slow server: its callers were
      // told it failed, and each write is idempotent by its key, so a retry finds it.
      if (timedOut && client) this.#drop(client)
      throw err
    } finally {
      clearTimeout(timer)
      work.catch(() => {})
    }
  }

  #drop (c: pg.Client): void {
    if (this.#client === c) this.#client = undefined
    destroySocket(c)
  }

  async close (): Promise<void> {
    this.#closed = true
    while (this.#flushing) await sleep(10)
    await this.#connecting?.catch(() => {})
    await this.#client?.end().catch(() => {})
    this.#client = undefined
  }
}
