// The lane table: every limit of every lane, declared once. The admission
// bulkhead, the pg pool, the DB role's CONNECTION LIMIT, under-pressure, the
// gateway's per-lane cap and the metric labels are all derived from it.
// Defaults are BULKHEAD-PAY-001's numbers; each can be overridden by env with
// the lane's prefix (CARD_AUTH_PERMITS, TAX_QUEUE, FRAUD_POOL_MAX, ...).
import { Type, type Static } from 'typebox'
import { loadConfig } from './config.ts'
import { LEAK_DETECTION_DEFAULT_MS } from './db/leak-detection.ts'
import { AppError, ERRORS } from './errors.ts'
import { rateLimitFields } from './rate-limit-fields.ts'
import { PRESSURE_SCHEMA_PROPERTIES, toPressureLimits, type PressureLimits } from './pressure-config.ts'
import { QUEUES } from './queue/job-types.ts'

export const LANE_NAMES = ['card-auth', 'fraud', 'tax'] as const
export type LaneName = typeof LANE_NAMES[number]

export interface LaneDefaults {
  readonly priority: 'P0' | 'P1' | 'P2'
  readonly permits: number
  readonly queue: number
  /** How long a queued request may wait for a permit before it is rejected. */
  readonly queueWaitMs: number
  /** Fleet-wide connection budget: the role's CONNECTION LIMIT. */
  readonly poolMax: number
  readonly role: string
  readonly schema: string
  readonly port: number
  /** The lane's answer when it cannot take more (status and Retry-After from the error registry). */
  readonly saturated: SaturationCode
  /** The group-commit writer's delay under load (shared/db/group-commit.ts `delayMs`). */
  readonly commitDelayMs: number
  /** Whose fair share the bulkhead keeps when contended (shared/bulkhead.ts). */
  readonly fairBy: FairBy
  /** Free permits kept, while another tenant is in flight, from a tenant at its share (shared/bulkhead.ts). */
  readonly fairReserve: number
}

/**
 * A lane's tenants: the request's `merchantId` (the client's id when it has
 * none), the API client, or none (plain FIFO).
 */
export type FairBy = 'merchant' | 'client' | 'off'

export type SaturationCode = 'ERR_CARD_AUTH_SATURATED' | 'ERR_FRAUD_SATURATED' | 'ERR_TAX_BULKHEAD_SATURATED'

export const LANE_DEFAULTS: Readonly<Record<LaneName, LaneDefaults>> = Object.freeze({
  // 50 ms of queue wait keeps a queued card authorization inside the 120 ms p99 SLA.
  'card-auth': { priority: 'P0', permits: 75, queue: 10, queueWaitMs: 50, poolMax: 40, role: 'card_auth_ds', schema: 'card_auth', port: 8101, saturated: 'ERR_CARD_AUTH_SATURATED', commitDelayMs: 10, fairBy: 'merchant', fairReserve: 5 },
  // Fraud's own overflow is a 202 (queued screening); this is its answer when it cannot queue either.
  fraud: { priority: 'P1', permits: 30, queue: 5, queueWaitMs: 100, poolMax: 15, role: 'fraud_ds', schema: 'fraud', port: 8102, saturated: 'ERR_FRAUD_SATURATED', commitDelayMs: 0, fairBy: 'merchant', fairReserve: 2 },
  // INV-BH-02: the tax lane never queues. Its overflow is a compensated quote, else this.
  tax: { priority: 'P2', permits: 15, queue: 0, queueWaitMs: 0, poolMax: 5, role: 'tax_ds', schema: 'tax', port: 8103, saturated: 'ERR_TAX_BULKHEAD_SATURATED', commitDelayMs: 0, fairBy: 'client', fairReserve: 2 },
})

/**
 * A lane's saturation answer (DESIGN §2-3): its code from the lane table, the
 * registry's status and Retry-After, and the RateLimit fields naming the
 * capacity that was full (`quota` of it per `windowSeconds`), and any
 * `extensions` (a fair-share refusal's figures). The gateway
 * answers with it when its in-flight cap for a lane that is up is full.
 */
export function saturationError (
  lane: LaneName,
  detail: string,
  policy: { name: string, quota: number, windowSeconds?: number },
  extensions: Record<string, unknown> = {}
): AppError {
  const code = LANE_DEFAULTS[lane].saturated
  const fields = rateLimitFields({
    name: policy.name,
    quota: policy.quota,
    windowSeconds: policy.windowSeconds ?? 1,
    resetSeconds: ERRORS[code].retryAfter,
  })
  return new AppError(code, { detail, headers: fields.headers, extensions: { ...fields.extensions, ...extensions } })
}

/** Connections of each lane replica's share kept out of its pool for a pool reset (shared/db/pool.ts). */
export const RESET_CONNECTIONS = 1

/**
 * Every lane writes through one reserved connection of its group-commit writer
 * (shared/db/group-commit.ts): card-auth its authorizations, fraud and tax their
 * shed answers (a queued screening, a compensated quote).
 */
export const WRITER_CONNECTIONS = 1

/** The job queues each lane owns (its async work; the worker loads services/<lane>/jobs). */
export const LANE_QUEUES: Readonly<Record<LaneName, readonly string[]>> = Object.freeze({
  'card-auth': [],
  fraud: [QUEUES.fraudAsync],
  tax: [QUEUES.taxReconcile],
})

/** The queue worker's role owns only the queue schema. */
export const JOBS_ROLE = Object.freeze({ role: 'jobs_ds', schema: 'jobs', poolMax: 10 })

const prefixed = (role: string, env: Record<string, string | undefined>): string => (env.ROLE_PREFIX ?? '') + role

export function jobsRoleName (env: Record<string, string | undefined> = process.env): string {
  return prefixed(JOBS_ROLE.role, env)
}

/**
 * The deck's own role on the queue schema: its reads and controls run on a
 * budget of 2 connections that no worker shares, so an operator's page can
 * never take a worker's connection (and a busy worker fleet never blinds it).
 */
export const DECK_ROLE = Object.freeze({ role: 'deck_ds', schema: 'jobs', poolMax: 2 })

export function deckRoleName (env: Record<string, string | undefined> = process.env): string {
  return prefixed(DECK_ROLE.role, env)
}

export function envPrefix (lane: string): string {
  return lane.toUpperCase().replaceAll('-', '_') + '_'
}

/** One tenant's weight in `<LANE>_FAIR_WEIGHTS`: a tenant id, `=`, a positive decimal number. */
const WEIGHT = /^[A-Za-z0-9_.:-]{1,64}=(?:\d{1,6}(?:\.\d{1,3})?)$/

/** `<LANE>_FAIR_WEIGHTS` read: tenant to weight; a weight of 0 is refused (a tenant must be able to run). */
function fairWeights (prefix: string, written: string): ReadonlyMap<string, number> {
  const m = new Map<string, number>()
  for (const pair of written.split(',').filter(Boolean)) {
    const [tenant, w] = pair.split('=') as [string, string]
    if (!(Number(w) > 0)) throw new AppError('ERR_CONFIG_INVALID', { detail: `${prefix}FAIR_WEIGHTS gives ${tenant} a weight of ${w}: a weight must be above 0` })
    m.set(tenant, Number(w))
  }
  return m
}

export function laneSchema (d: LaneDefaults, workerPool: number) {
  const int = (def: number, min = 0, max = 100_000) => Type.Integer({ default: def, minimum: min, maximum: max })
  const num = (def: number, min: number, max: number) => Type.Number({ default: def, minimum: min, maximum: max })
  return Type.Object({
    PERMITS: int(d.permits, 1, 10_000),
    QUEUE: int(d.queue, 0, 10_000),
    QUEUE_WAIT_MS: int(d.queueWaitMs, 0, 60_000),
    DEADLINE_MS: int(10_000, 10, 600_000),
    POOL_MAX: int(d.poolMax, 1, 1_000),
    // Connections of the role reserved for the lane's async jobs in the worker.
    WORKER_POOL_MAX: int(workerPool, 0, 1_000),
    // 0: each replica's share follows the replicas that run (lane-kit/replica-share.ts);
    // N: a fixed share for N replicas, as before the replicas registered.
    REPLICAS: int(0, 0, 1_000),
    REPLICA_HEARTBEAT_MS: int(2_000, 50, 60_000),
    // A replica whose heartbeat is older than this no longer counts (a killed one).
    REPLICA_TTL_MS: int(10_000, 100, 600_000),
    STATEMENT_TIMEOUT_MS: int(5_000, 1, 600_000),
    IDLE_IN_TX_TIMEOUT_MS: int(10_000, 1, 600_000),
    // DEC-BH-01: a connection checked out longer than this is reported as a leak (0 = off).
    LEAK_DETECTION_MS: int(LEAK_DETECTION_DEFAULT_MS, 0, 600_000),
    COMMIT_DELAY_MS: int(d.commitDelayMs, 0, 1_000),
    // Fair admission between tenants (shared/bulkhead.ts): who they are, their
    // weights ("m_gold=4,m_silver=2"; others 1), and the permits kept for those under their share.
    FAIR_BY: Type.Union([Type.Literal('merchant'), Type.Literal('client'), Type.Literal('off')], { default: d.fairBy }),
    FAIR_WEIGHTS: Type.String({ default: '', pattern: `^(${WEIGHT.source.slice(1, -1)}(,${WEIGHT.source.slice(1, -1)})*)?$`, maxLength: 100_000 }),
    FAIR_RESERVE: int(d.fairReserve, 0, 10_000),
    // MC-RT-01: once the lane's dependency is back, active permits must drop below
    // RECOVERY_BASELINE_ACTIVE within this long, else the pool is reset and
    // ALERT_BULKHEAD_RECOVERY_LAG raised (lane-kit/recovery.ts).
    RECOVERY_LAG_MS: int(10_000, 100, 3_600_000),
    RECOVERY_BASELINE_ACTIVE: int(Math.ceil(d.permits / 3), 1, 10_000),
    STATE_SATURATED_EXIT_BELOW: num(0.8, 0.01, 1),
    STATE_RECOVER_BELOW: num(0.6, 0.01, 1),
    STATE_RECOVER_WINDOW_MS: int(10_000, 0, 3_600_000),
    ...PRESSURE_SCHEMA_PROPERTIES,
    PORT: int(d.port, 0, 65_535),
    HOST: Type.String({ default: '127.0.0.1' }),
    ROLE_PREFIX: Type.String({ default: '', pattern: '^[a-z0-9_]*$', maxLength: 30 }),
  })
}

export interface LaneLimits {
  readonly lane: LaneName
  readonly priority: LaneDefaults['priority']
  readonly permits: number
  readonly queue: number
  readonly queueWaitMs: number
  readonly deadlineMs: number
  readonly db: {
    readonly role: string
    readonly schema: string
    /** The role's CONNECTION LIMIT, shared by every replica of the lane. */
    readonly roleConnectionLimit: number
    /** `<LANE>_REPLICAS`: 0, the share follows the live replicas; N, a fixed share for N. */
    readonly replicas: number
    /** What the lane's replicas share of the role's limit: all but the workers' part. */
    readonly replicaBudget: number
    /**
     * The pool's max at a share for max(1, replicas) replicas: its share less
     * its writer (WRITER_CONNECTIONS) and one for a reset (RESET_CONNECTIONS).
     * With replicas 0, the most it may grow to.
     */
    readonly poolMax: number
    readonly replicaHeartbeatMs: number
    readonly replicaTtlMs: number
    /** Connections of the role the worker may use for this lane's jobs (fleet-wide). */
    readonly workerPoolMax: number
    readonly statementTimeoutMs: number
    readonly idleInTxTimeoutMs: number
    readonly leakDetectionMs: number
    /**
     * Under load, how long the lane's group-commit writer holds a batch for
     * more to join (ms; 0: one turn of the event loop).
     */
    readonly commitDelayMs: number
  }
  /** MC-RT-01's recovery check: back under `baselineActive` permits within `lagMs` of the dependency's recovery. */
  readonly recovery: { readonly lagMs: number, readonly baselineActive: number }
  readonly state: {
    readonly saturatedExitBelow: number
    readonly recoverBelow: number
    readonly recoverWindowMs: number
  }
  readonly pressure: PressureLimits
  readonly gateway: { readonly inflightCap: number }
  /** Fair admission between tenants: who they are, their weights (default 1), the reserve. */
  readonly fair: { readonly by: FairBy, readonly weights: ReadonlyMap<string, number>, readonly reserve: number }
  readonly port: number
  readonly host: string
}

/**
 * A replica's pool max for a share of its role's limit: the share less its
 * writer and its reset connection, at least one.
 */
export function poolMaxOfShare (share: number): number {
  return Math.max(1, share - WRITER_CONNECTIONS - RESET_CONNECTIONS)
}

/**
 * The gateway's in-flight cap for a lane: what two replicas can hold (permits and
 * queue), plus headroom for a burst the lane answers itself at once (429, a
 * compensated quote, a 202): the spec's bursts (150 fraud screenings, 60 tax
 * quotes at once) must reach the lane's own shed policy, not the gateway's cap.
 */
export const GATEWAY_BURST_HEADROOM = 150
export function gatewayCap (permits: number, queue: number): number {
  return 2 * (permits + queue) + GATEWAY_BURST_HEADROOM
}

export function laneLimits (lane: LaneName, env: Record<string, string | undefined> = process.env): LaneLimits {
  const d = LANE_DEFAULTS[lane]
  const prefix = envPrefix(lane)
  const scoped: Record<string, string | undefined> = {}
  for (const [k, v] of Object.entries(env)) if (k.startsWith(prefix)) scoped[k.slice(prefix.length)] = v
  if (env.ROLE_PREFIX !== undefined && scoped.ROLE_PREFIX === undefined) scoped.ROLE_PREFIX = env.ROLE_PREFIX
  const schema = laneSchema(d, LANE_QUEUES[lane].length > 0 ? 1 : 0)
  const c: Static<ReturnType<typeof laneSchema>> = loadConfig(schema, scoped)
  // The default reserve never takes all of a lane's permits; one set by hand must be below them.
  const reserveSet = scoped.FAIR_RESERVE !== undefined && scoped.FAIR_RESERVE !== ''
  const reserve = reserveSet ? c.FAIR_RESERVE : Math.min(c.FAIR_RESERVE, c.PERMITS - 1)
  if (reserve >= c.PERMITS) throw new AppError('ERR_CONFIG_INVALID', { detail: `${prefix}FAIR_RESERVE (${c.FAIR_RESERVE}) must be below ${prefix}PERMITS (${c.PERMITS})` })
  if (c.WORKER_POOL_MAX >= c.POOL_MAX) throw new AppError('ERR_CONFIG_INVALID', { detail: `${prefix}WORKER_POOL_MAX (${c.WORKER_POOL_MAX}) must be below ${prefix}POOL_MAX (${c.POOL_MAX})` })
  return Object.freeze({
    lane,
    priority: d.priority,
    permits: c.PERMITS,
    queue: c.QUEUE,
    queueWaitMs: c.QUEUE_WAIT_MS,
    deadlineMs: c.DEADLINE_MS,
    db: Object.freeze({
      role: c.ROLE_PREFIX + d.role,
      schema: d.schema,
      roleConnectionLimit: c.POOL_MAX,
      replicas: c.REPLICAS,
      replicaBudget: c.POOL_MAX - c.WORKER_POOL_MAX,
      // The lane's group-commit writer (card-auth's authorizations, fraud's and
      // tax's shed answers) is one connection of each replica's share, outside
      // its pool; one more is kept
      // free for a pool reset, which uses it to end the stuck backends it replaces
      // (shared/db/pool.ts): without it, those backends hold the role's whole limit
      // and the new pool cannot open a connection.
      poolMax: poolMaxOfShare(Math.floor((c.POOL_MAX - c.WORKER_POOL_MAX) / Math.max(1, c.REPLICAS))),
      replicaHeartbeatMs: c.REPLICA_HEARTBEAT_MS,
      replicaTtlMs: c.REPLICA_TTL_MS,
      workerPoolMax: c.WORKER_POOL_MAX,
      statementTimeoutMs: c.STATEMENT_TIMEOUT_MS,
      idleInTxTimeoutMs: c.IDLE_IN_TX_TIMEOUT_MS,
      leakDetectionMs: c.LEAK_DETECTION_MS,
      commitDelayMs: c.COMMIT_DELAY_MS,
    }),
    recovery: Object.freeze({
      lagMs: c.RECOVERY_LAG_MS, baselineActive: Math.min(c.RECOVERY_BASELINE_ACTIVE, c.PERMITS),
    }),
    state: Object.freeze({
      saturatedExitBelow: c.STATE_SATURATED_EXIT_BELOW,
      recoverBelow: c.STATE_RECOVER_BELOW,
      recoverWindowMs: c.STATE_RECOVER_WINDOW_MS,
    }),
    pressure: toPressureLimits(c),
    gateway: Object.freeze({ inflightCap: gatewayCap(c.PERMITS, c.QUEUE) }),
    fair: Object.freeze({ by: c.FAIR_BY, weights: fairWeights(prefix, c.FAIR_WEIGHTS), reserve }),
    port: c.PORT,
    host: c.HOST,
  })
}

/** Where a lane listens, from its limits (the default a caller uses when no URL is configured). */
export function laneUrl (l: LaneLimits): string {
  return `http://${l.host}:${l.port}`
}

/** A DB role of the fleet (dbRoles()). */
export interface DbRole {
  role: string
  schema: string
  connectionLimit: number
  statementTimeoutMs: number
  idleInTxTimeoutMs: number
  enqueues: boolean
}

/** Every DB role of the fleet with its fleet-wide connection limit, derived from the lane table. */
export function dbRoles (env: Record<string, string | undefined> = process.env): DbRole[] {
  const lanes = LANE_NAMES.map(n => laneLimits(n, env)).map(l => ({
    role: l.db.role,
    schema: l.db.schema,
    connectionLimit: l.db.roleConnectionLimit,
    statementTimeoutMs: l.db.statementTimeoutMs,
    idleInTxTimeoutMs: l.db.idleInTxTimeoutMs,
    enqueues: LANE_QUEUES[l.lane].length > 0,
  }))
  const jobsLimit = Number(env.JOBS_POOL_MAX ?? JOBS_ROLE.poolMax)
  return [
    ...lanes,
    {
      role: jobsRoleName(env),
      schema: JOBS_ROLE.schema,
      connectionLimit: jobsLimit,
      statementTimeoutMs: 5_000,
      idleInTxTimeoutMs: 10_000,
      enqueues: false,
    },
    {
      role: deckRoleName(env),
      schema: DECK_ROLE.schema,
      connectionLimit: DECK_ROLE.poolMax,
      statementTimeoutMs: 2_000,
      idleInTxTimeoutMs: 5_000,
      enqueues: false,
    },
  ]
}
