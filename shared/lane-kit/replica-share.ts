// A lane replica's share of its role's CONNECTION LIMIT, following the
// replicas that really run instead of a replica count kept in step by hand.
// Each replica heartbeats a row in its lane's schema (lane_replicas, 0014)
// with the share it holds, and sizes its pool to its fair share of the lane's
// budget (the role's limit less the workers' part) among the replicas whose
// heartbeat is recent. It shrinks at once and grows only into what the others'
// recorded shares leave free, so a replica that joins takes its share as the
// others give theirs up: the sum stays within the limit at every moment, and a
// lone replica, at the minimum scale, uses the whole budget. The row also
// carries the state of the replica's dependency breakers (0015), written with
// each heartbeat and at once when it changes.
import { setTimeout as sleep } from 'node:timers/promises'
import type pg from 'pg'
import { newId } from '../ids.ts'
import { poolMaxOfShare, RESET_CONNECTIONS, WRITER_CONNECTIONS, type LaneLimits } from '../lanes.ts'
import { resizePool } from '../db/pool.ts'
import { withTransaction } from '../db/transaction.ts'

/** The least a replica holds: one pooled connection, its writer's, and one kept for a reset. */
export const MIN_SHARE = 1 + WRITER_CONNECTIONS + RESET_CONNECTIONS

export interface ShareLog { info (o: object, m: string): void, warn (o: object, m: string): void }

export class ReplicaShare {
  readonly id = newId()
  readonly #limits: LaneLimits
  readonly #pool: () => pg.Pool
  readonly #log: ShareLog
  readonly #fixed: boolean
  #share: number
  #live = 1
  #timer: NodeJS.Timeout | undefined
  #beating: Promise<void> | undefined
  #fair = 0
  #grown: (poolMax: number) => void = () => {}
  /** This replica's dependency breakers as one state, recorded with each heartbeat (0015); null: none. */
  breakerState: () => 'closed' | 'open' | 'half_open' | null = () => null

  constructor (o: { limits: LaneLimits, pool: () => pg.Pool, log: ShareLog }) {
    this.#limits = o.limits
    this.#pool = o.pool
    this.#log = o.log
    // <LANE>_REPLICAS=N: a fixed share for N replicas, as before replicas registered.
    this.#fixed = o.limits.db.replicas > 0
    // Until start(), a lone replica's share: an app built in-process (tests,
    // tools) never registers. A registering replica starts from the least
    // and grows into what the others leave.
    this.#share = Math.floor(o.limits.db.replicaBudget / Math.max(1, o.limits.db.replicas))
  }

  /** The pool max this replica may have now. */
  get poolMax (): number { return Math.min(this.#limits.db.poolMax, poolMaxOfShare(this.#share)) }
  /** Replicas counted in the last heartbeat, this one included. */
  get live (): number { return this.#fixed ? this.#limits.db.replicas : this.#live }
  get share (): number { return this.#share }
  /** Whether this replica has its fair share (a joining one waits for the others to give theirs up). */
  get settled (): boolean { return this.#fixed || this.#share >= Math.max(MIN_SHARE, this.#fair) }

  /** Called with the pool max at a heartbeat that finds the pool below it (lane-main opens the rest). */
  onGrow (fn: (poolMax: number) => void): void { this.#grown = fn }

  /** Resolves once settled, or after `maxMs` (a share the others never give up is not waited for longer). */
  async settle (maxMs: number): Promise<void> {
    const until = Date.now() + maxMs
    while (!this.settled && Date.now() < until) await sleep(Math.min(100, this.#limits.db.replicaHeartbeatMs))
  }

  /** The first heartbeat (so the pool warms to its share), then one every REPLICA_HEARTBEAT_MS. */
  async start (): Promise<void> {
    if (this.#fixed) return
    this.#share = MIN_SHARE
    resizePool(this.#pool(), this.poolMax)
    await this.beat()
    this.#timer = setInterval(() => { this.#beatOnce() }, this.#limits.db.replicaHeartbeatMs)
    this.#timer.unref()
  }

  /** Its fair share among `others` + 1 replicas, within what the others' `shares` leave, never under MIN_SHARE. */
  #target (others: number, shares: number): number {
    const budget = this.#limits.db.replicaBudget
    return Math.max(MIN_SHARE, Math.min(Math.floor(budget / (others + 1)), budget - shares))
  }

  /**
   * A heartbeat now rather than at the next one (after the one under way, which
   * may have read the state before): its breakers changed state, and
   * worker-tax reads it from the row.
   */
  announce (): void {
    if (this.#timer === undefined) return
    if (this.#beating) void this.#beating.then(() => { this.#beatOnce() })
    else this.#beatOnce()
  }

  #beatOnce (): void {
    this.#beating ??= this.beat().catch(err => this.#log.warn({ err }, 'replica heartbeat failed; the share stays as it is')).finally(() => { this.#beating = undefined })
  }

  /** Stops beating and removes this replica's row, so the others take its share at once. */
  async stop (): Promise<void> {
    clearInterval(this.#timer)
    await this.#beating
    if (this.#fixed) return
    await this.#pool().query(`delete from ${this.#limits.db.schema}.lane_replicas where id = $1`, [this.id]).catch(() => {})
  }

  /**
   * One heartbeat, in one transaction under a lock of the lane's (so no two
   * replicas decide from the same reading): read the others' live shares, take
   * min(fair share, what they leave), and record it before growing into it, or,
   * when shrinking, what this replica still holds until its connections over
   * the new share have come back. Rows long dead are swept on the way.
   */
  async beat (): Promise<void> {
    const s = this.#limits.db.schema
    const pool = this.#pool()
    const { others, shares } = await withTransaction(pool, async c => {
      await c.query('select pg_advisory_xact_lock(hashtext($1))', [`${s}.lane_replicas`])
      const { rows } = await c.query<{ others: number, shares: number }>(
        `select count(*)::int as others, coalesce(sum(share), 0)::int as shares
         from ${s}.lane_replicas where id <> $1 and heartbeat_at > now() - make_interval(secs => $2 / 1000.0)`,
        [this.id, this.#limits.db.replicaTtlMs])
      const r = rows[0]!
      const target = this.#target(r.others, r.shares)
      const held = Math.max(target, pool.totalCount + WRITER_CONNECTIONS + RESET_CONNECTIONS)
      await c.query(
        `insert into ${s}.lane_replicas (id, heartbeat_at, share, breaker) values ($1, now(), $2, $3)
         on conflict (id) do update set heartbeat_at = now(), share = excluded.share, breaker = excluded.breaker`,
        [this.id, held, this.breakerState()])
      await c.query(`delete from ${s}.lane_replicas where id <> $1 and heartbeat_at < now() - make_interval(secs => $2 * 10 / 1000.0)`, [this.id, this.#limits.db.replicaTtlMs])
      return r
    })
    const budget = this.#limits.db.replicaBudget
    const fair = Math.floor(budget / (others + 1))
    const target = this.#target(others, shares)
    this.#live = others + 1
    this.#fair = fair
    if (target !== this.#share) {
      const from = this.#share
      this.#share = target
      resizePool(pool, this.poolMax)
      this.#log.info({ role: this.#limits.db.role, replicas: this.#live, share: target, was: from, poolMax: this.poolMax }, 'replica share changed')
      if (fair < MIN_SHARE) this.#log.warn({ role: this.#limits.db.role, replicas: this.#live, budget, minShare: MIN_SHARE }, `the ${this.#limits.lane} role's budget of ${budget} cannot give ${this.#live} replicas ${MIN_SHARE} connections each: run fewer replicas or raise the limit`)
    }
    // A pool below its max (its share grew, a shrink closed one too many, a
    // connection died) is opened to it again: the lane keeps its share open.
    if (pool.totalCount < this.poolMax) this.#grown(this.poolMax)
  }
}
