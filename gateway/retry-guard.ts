// Retry-storm defence (ADV-IR-01, INV-BH-04), before any request reaches a lane.
// A retry is a request whose (client, Idempotency-Key) was seen before.
//  - per key: the 5th attempt of one (client, key) within ANY 10 s — a 4th
//    retry — gets 429 ERR_RETRY_STORM_BLOCKED. An @fastify/rate-limit limiter
//    keyed by client and key, on a sliding log (gateway/sliding-log.ts), not the
//    plugin's fixed windows, which let up to 8 attempts through around a window
//    edge. Refused attempts count too: the limit is on attempts, so a client
//    that retries without backoff stays refused until it waits as told. An
//    attempt passed on counts until it is answered, and its window runs from
//    the answer: so at most 4 attempts of a key reach a lane in any 10 s also
//    when the lane is backed up and receives them late (SlidingLog.hold);
//  - backoff: a retry that comes back sooner than the Retry-After its key was
//    given is refused unprocessed (ADV-IR-01: no requests without backoff);
//  - retry budget: a client's retries may be at most `budgetRatio` of its
//    requests in the window, with a floor so a quiet client can still retry;
//  - client rate: a plain per-client request rate (@fastify/rate-limit, its own
//    fixed-window store).
// The counters live in this process's memory, or, with REDIS_URL, in Redis,
// shared by every gateway replica (guard-store.ts): one round trip decides
// all of the above. While Redis is out, each replica enforces its share of
// each limit here (limit / GATEWAY_REPLICAS, at least one attempt per key).
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import rateLimit, { type RateLimitPluginOptions } from '@fastify/rate-limit'
import { AppError } from '../shared/errors.ts'
import { rateLimitFields } from '../shared/rate-limit-fields.ts'
import { dropOldest, SlidingLog, slidingLogStore } from './sliding-log.ts'
import { StoreUnavailable, type RedisGuardStore, type SharedDecision } from './guard-store.ts'

export interface RetryGuardConfig {
  /** Attempts of one (client, key) allowed per window: 4 = the first try and 3 retries. */
  perKeyAttempts: number
  windowMs: number
  /** Retries may be at most this share of the client's requests in the window. */
  budgetRatio: number
  /** …but a client may always make this many retries per window. */
  budgetFloor: number
  clientRateMax: number
  clientRateWindowMs: number
  /** How many (client, key) pairs are remembered, to recognise retries and to count attempts. */
  seenCapacity: number
}

export const RETRY_GUARD_DEFAULTS: Readonly<RetryGuardConfig> = Object.freeze({
  perKeyAttempts: 4,
  windowMs: 10_000,
  budgetRatio: 0.2,
  budgetFloor: 10,
  clientRateMax: 5_000,
  clientRateWindowMs: 1_000,
  seenCapacity: 200_000,
})

export type BlockReason = 'retry_storm' | 'retry_early' | 'retry_budget' | 'client_rate'

interface Window { start: number, requests: number, retries: number }

/** A retry up to this share of its Retry-After early still counts as backing off (clocks and networks jitter). */
const EARLY_TOLERANCE = 0.2

/** The spec's Retry-After for a refused retry (ADV-IR-01: "MUST include Retry-After: 5"). */
export const RETRY_STORM_MIN_RETRY_AFTER_S = 5

type Limiter = (req: FastifyRequest) => Promise<{
  isAllowed: boolean, isExceeded?: boolean, ttlInSeconds?: number, key: string
}>
type CreateLimiter = (o: object) => Limiter

/**
 * @fastify/rate-limit's limiter factory with its own plugin options (its store
 * is per registration), registered in an encapsulated scope so that two
 * registrations with different stores can live in one app.
 */
async function limiters (app: FastifyInstance, opts: RateLimitPluginOptions): Promise<CreateLimiter> {
  let create: CreateLimiter | undefined
  await app.register(async scope => {
    await scope.register(rateLimit, { ...opts, global: false })
    const s = scope as unknown as { createRateLimit: CreateLimiter }
    create = o => s.createRateLimit(o)
  })
  return create!
}

export interface RetryGuardOptions {
  config: RetryGuardConfig
  onBlock: (reason: BlockReason) => void
  /**
   * The longest a request can be in flight to a lane (its deadline, the
   * gateway's wait, the connect): bounds a hold whose answer never comes.
   */
  maxInFlightMs: number
  /**
   * The counters shared by every gateway replica (guard-store.ts); without it
   * they live in this process only. While it is unavailable this replica
   * enforces its share of each limit locally (`replicas`: how many share them).
   */
  shared?: { store: RedisGuardStore, replicas: number, onLocal: () => void }
}

/** This replica's share of each limit while the shared store is out: limit / N, never below one. */
export function replicaShare (cfg: RetryGuardConfig, replicas: number): RetryGuardConfig {
  const share = (n: number): number => Math.max(1, Math.floor(n / Math.max(1, replicas)))
  return {
    ...cfg,
    perKeyAttempts: share(cfg.perKeyAttempts),
    budgetFloor: share(cfg.budgetFloor),
    clientRateMax: share(cfg.clientRateMax),
  }
}

const HELD = Symbol('retry-guard-held')
/** A request decided by the shared store: its id there, its key, and whether its attempt is held. */
const SHARED = Symbol('retry-guard-shared')
type Held = FastifyRequest & { [HELD]?: string, [SHARED]?: { key: string, held: boolean } }

type Block = (reason: BlockReason, detail: string, policy: string, q: number, w: number, ttl: number, code: 'ERR_RETRY_STORM_BLOCKED' | 'ERR_CLIENT_RATE_LIMITED') => never

const details = (cfg: RetryGuardConfig) => {
  const windowSec = Math.ceil(cfg.windowMs / 1000)
  return {
    windowSec,
    clientRate: `more than ${cfg.clientRateMax} requests in ${cfg.clientRateWindowMs} ms`,
    storm: `more than ${cfg.perKeyAttempts - 1} retries of this Idempotency-Key within ${windowSec} s`,
    early: (ms: number) => `this Idempotency-Key was retried before the Retry-After it was given (${(ms / 1000).toFixed(1)} s early)`,
    budget: `retries are limited to ${Math.round(cfg.budgetRatio * 100)}% of this client's requests (at least ${cfg.budgetFloor}) per ${windowSec} s`,
  }
}

const clientOf = (req: FastifyRequest): string => (req as FastifyRequest & { clientId: string }).clientId

/**
 * The guard in this process's memory, with `cfg`'s limits: a function a route
 * calls (it throws the refusal), and what the hooks call on each answer.
 */
async function localGuard (app: FastifyInstance, cfg: RetryGuardConfig, maxInFlightMs: number, block: Block) {
  const attemptLog = new SlidingLog({ capacity: cfg.seenCapacity, countRejected: true })
  const perKey = (await limiters(app, { store: slidingLogStore(attemptLog) }))({
    max: cfg.perKeyAttempts, timeWindow: cfg.windowMs, keyGenerator: (req: FastifyRequest) => ['k', clientOf(req), String(req.headers['idempotency-key'])].join(':'),
  })
  const perClient = (await limiters(app, {}))({ max: cfg.clientRateMax, timeWindow: cfg.clientRateWindowMs, keyGenerator: (req: FastifyRequest) => `c:${clientOf(req)}` })
  const text = details(cfg)

  // Insertion-ordered Map as a bounded memory of seen keys: the oldest go first.
  // Each key maps to the earliest a retry of it is welcome (the last answer's
  // Retry-After; 0: any time). Client and key are joined into one flat string
  // by join(): a template literal would keep a concatenation node and its
  // flattened copy beside the header's own string, over twice the heap per key.
  const seen = new Map<string, number>()
  const seenKeyOf = (client: string, key: string): string => [client, key].join('\u0000')
  const windows = new Map<string, Window>()

  return {
    /** An answer to a POST with `key` said Retry-After: a retry is welcome from `notBefore` on. */
    retryAfter (req: FastifyRequest, key: string, notBefore: number): void {
      const seenKey = seenKeyOf(clientOf(req), key)
      if (seen.has(seenKey)) seen.set(seenKey, notBefore)
    },
    /** An attempt held in flight counts from its answer (or from an abort) on. */
    release (key: string): void { attemptLog.release(key) },
    async guard (req: FastifyRequest): Promise<void> {
      const client = clientOf(req)
      const rate = await perClient(req)
      if (!rate.isAllowed && rate.isExceeded) block('client_rate', text.clientRate, 'client-rate', cfg.clientRateMax, Math.ceil(cfg.clientRateWindowMs / 1000), rate.ttlInSeconds ?? 1, 'ERR_CLIENT_RATE_LIMITED')
      const key = req.headers['idempotency-key']
      if (req.method !== 'POST' || typeof key !== 'string') return

      const now = Date.now()
      let win = windows.get(client)
      if (!win || now - win.start >= cfg.windowMs) {
        win = { start: now, requests: 0, retries: 0 }
        windows.set(client, win)
      }
      win.requests++
      const seenKey = seenKeyOf(client, key)
      const notBefore = seen.get(seenKey)
      const isRetry = notBefore !== undefined
      seen.delete(seenKey)
      seen.set(seenKey, notBefore ?? 0)
      // Past capacity the oldest 1% go at once (one key per request costs more and more: sliding-log.ts).
      if (seen.size > cfg.seenCapacity) dropOldest(seen, Math.ceil(cfg.seenCapacity / 100))

      const attempts = await perKey(req)
      if (!attempts.isAllowed && attempts.isExceeded) {
        block('retry_storm', text.storm, 'retry-storm', cfg.perKeyAttempts, text.windowSec, attempts.ttlInSeconds ?? text.windowSec, 'ERR_RETRY_STORM_BLOCKED')
      }
      attemptLog.hold(attempts.key, maxInFlightMs)
      const held: Held = req
      held[HELD] = attempts.key
      // ADV-IR-01 forbids processing requests without client backoff. HTTP has no
      // request header by which a client declares it backs off, but its retries
      // show it: a retry of a key that was told Retry-After N and comes back
      // sooner (by more than a fifth of N) is refused unprocessed, and told again.
      if (isRetry && now < notBefore) {
        block('retry_early', text.early(notBefore - now), 'retry-after', 1, text.windowSec, Math.ceil((notBefore - now) / 1000), 'ERR_RETRY_STORM_BLOCKED')
      }
      if (isRetry) {
        const allowed = Math.max(cfg.budgetFloor, Math.floor(cfg.budgetRatio * win.requests))
        if (win.retries + 1 > allowed) {
          const ttl = Math.max(1, Math.ceil((win.start + cfg.windowMs - now) / 1000))
          block('retry_budget', text.budget, 'retry-budget', allowed, text.windowSec, ttl, 'ERR_RETRY_STORM_BLOCKED')
        }
        win.retries++
      }
    },
  }
}

/**
 * The guard as a plugin: decorates `app.retryGuard(req)`, which a route calls
 * once it knows the client (it throws the refusal), and adds the hooks that
 * note each answer's Retry-After and release its hold. Not encapsulated: the
 * hooks see every answer.
 */
const retryGuardPlugin: FastifyPluginAsync<RetryGuardOptions> = async (app, o) => {
  const { config: cfg, onBlock, maxInFlightMs, shared } = o
  const block: Block = (reason, detail, policy, q, w, ttl, code) => {
    onBlock(reason)
    // RateLimit's t= says when there is room again; Retry-After, which wins, is
    // never below the spec's 5 s for a refused retry: waiting longer is always
    // safe (the log only ages), and a client that honours it retries at most every
    // 5 s, twice in a 10 s window, so it is never refused again.
    const retryAfter = code === 'ERR_RETRY_STORM_BLOCKED' ? Math.max(RETRY_STORM_MIN_RETRY_AFTER_S, ttl) : Math.max(1, ttl)
    const fields = rateLimitFields({ name: policy, quota: q, windowSeconds: w, resetSeconds: ttl })
    throw new AppError(code, { detail, headers: { 'retry-after': String(retryAfter), ...fields.headers }, extensions: { ...fields.extensions, reason } })
  }
  // With a shared store, the local guard is the fallback and enforces this replica's share.
  const local = await localGuard(app, shared ? replicaShare(cfg, shared.replicas) : cfg, maxInFlightMs, block)
  const text = details(cfg)

  // Every answer to a POST with a key that carries Retry-After sets when a retry
  // of that key is welcome again (refusals of the guard itself included); an
  // attempt held in flight counts from its answer on.
  app.addHook('onSend', (req, reply, payload, done) => {
    const key = req.headers['idempotency-key']
    const retryAfter = Number(reply.getHeader('retry-after'))
    if (req.method === 'POST' && typeof key === 'string' && retryAfter > 0 && (req as Held)[SHARED] === undefined) {
      local.retryAfter(req, key, Date.now() + retryAfter * 1000 * (1 - EARLY_TOLERANCE))
    }
    done(null, payload)
  })
  // `reply`: the answer (none when the client went away first).
  const release = (req: FastifyRequest, reply?: FastifyReply): void => {
    const decided = (req as Held)[SHARED]
    if (decided !== undefined) {
      delete (req as Held)[SHARED]
      const retryAfterS = reply ? Number(reply.getHeader('retry-after')) || 0 : 0
      const retryAfterMs = retryAfterS > 0 ? retryAfterS * 1000 * (1 - EARLY_TOLERANCE) : 0
      shared!.store.answered(clientOf(req), decided.key, req.id, decided.held, retryAfterMs)
      return
    }
    const key = (req as Held)[HELD]
    if (key === undefined) return
    delete (req as Held)[HELD]
    local.release(key)
  }
  app.addHook('onResponse', (req, reply, done) => { release(req, reply); done() })
  app.addHook('onRequestAbort', (req, done) => { release(req); done() })

  const sharedGuard = async (req: FastifyRequest): Promise<boolean> => {
    const key = req.headers['idempotency-key']
    const withKey = req.method === 'POST' && typeof key === 'string' ? key : undefined
    let d: SharedDecision
    try {
      d = await shared!.store.decide(clientOf(req), withKey, req.id)
    } catch (err) {
      if (!(err instanceof StoreUnavailable)) throw err
      return false
    }
    const ttl = Math.max(1, Math.ceil(d.ttlMs / 1000))
    if (d.verdict === 'client_rate') block('client_rate', text.clientRate, 'client-rate', cfg.clientRateMax, Math.ceil(cfg.clientRateWindowMs / 1000), ttl, 'ERR_CLIENT_RATE_LIMITED')
    if (withKey === undefined) return true
    // Every attempt with a key is noted on its answer (the store released a refused one's hold already: none).
    ;(req as Held)[SHARED] = { key: withKey, held: d.verdict !== 'retry_storm' }
    if (d.verdict === 'retry_storm') block('retry_storm', text.storm, 'retry-storm', cfg.perKeyAttempts, text.windowSec, ttl, 'ERR_RETRY_STORM_BLOCKED')
    if (d.verdict === 'retry_early') block('retry_early', text.early(d.ttlMs), 'retry-after', 1, text.windowSec, ttl, 'ERR_RETRY_STORM_BLOCKED')
    if (d.verdict === 'retry_budget') block('retry_budget', text.budget, 'retry-budget', d.allowed, text.windowSec, ttl, 'ERR_RETRY_STORM_BLOCKED')
    return true
  }

  app.decorate('retryGuard', async function guard (req: FastifyRequest): Promise<void> {
    // While the store is out it throws at once, and this replica decides alone.
    if (shared) {
      if (await sharedGuard(req)) return
      shared.onLocal()
    }
    await local.guard(req)
  })
}

export const retryGuard = fp(retryGuardPlugin, { name: 'watertight-retry-guard', fastify: '5.x' })

declare module 'fastify' {
  interface FastifyInstance {
    /** Refuses a request of a retry storm, over its client's retry budget or rate (gateway/retry-guard.ts). */
    retryGuard (req: FastifyRequest): Promise<void>
  }
}
