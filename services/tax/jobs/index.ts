// tax-reconcile: re-quote a compensated quote with the provider once it answers,
// and record the true rate and tax on the quote. Runs in the worker with the tax
// lane's own role (tax_ds), at most MaxWorkers (3) at once fleet-wide, so the
// backlog after a brownout cannot re-overload the provider, and at most
// TAX_RECONCILE_PER_SECOND started per second by a worker process, so it cannot
// take the CPU the lane needs either. Idempotent: it only fills reconciled_* once.
// The provider's breaker (one per worker process) holds the queue while it is
// open: no job is claimed, and one that was already running goes back with its
// backoff, its attempt not counted. Only the breaker's probe calls the provider,
// and not even it while the tax lane's own breaker is open (or probing) and none
// of its replicas' is closed: the lane is probing the provider already, so the
// worker's probe reads the lane's rows (lane_replicas, 0015) and fails as the
// lane's did, and the provider sees one stream of probes, not two.
import { once } from 'node:events'
import pThrottle from 'p-throttle'
import type pg from 'pg'
import type { Pool } from 'undici'
import { loadConfig } from '../../../shared/config.ts'
import { laneLimits } from '../../../shared/lanes.ts'
import { TAX_RECONCILE_ENV } from '../config.ts'
import { createOriginPool } from '../../../shared/lane-kit/http.ts'
import { BreakerOpenError } from '../../../shared/breaker.ts'
import { DeferJobError, FatalJobError, JOB_NAMES, QUEUES, type JobLog, type JobType } from '../../../shared/queue/job-types.ts'
import { ProviderError, quoteFromProvider } from '../provider.ts'
import { logTransition, providerBreaker } from '../breaker.ts'

const SILENT: JobLog = { warn () {}, info () {} }

/**
 * The job types, with a provider client of their own per worker (3 sockets:
 * MaxWorkers of tax-reconcile). `laneDb`: the worker's pool on the tax role,
 * where the breaker's probe reads the lane's breaker.
 */
export function jobTypes (o: { log?: JobLog, laneDb?: () => pg.Pool | undefined } = {}): JobType[] {
  // A Pool opens no socket until the first job uses it.
  const cfg = loadConfig(TAX_RECONCILE_ENV, process.env)
  const provider: Pool = createOriginPool(cfg.TAX_PROVIDER_URL, { connections: 3, timeoutMs: 5_000 })
  // A lane replica whose heartbeat is older no longer counts (REPLICA_TTL_MS).
  const laneTtlMs = laneLimits('tax').db.replicaTtlMs
  // One start every 1/rate s, evenly. Every compensated quote is a job; drained as
  // fast as three workers and the CPU allow, the jobs take a large share of a
  // shared core (worker, its backends, the provider) and keep the lane they
  // reconcile saturated, compensating, making more jobs.
  const paced = pThrottle({ limit: 1, interval: 1000 / cfg.TAX_RECONCILE_PER_SECOND })(() => undefined)
  const breaker = providerBreaker(cfg, provider, t => { logTransition(o.log ?? SILENT, t) }, {
    caller: 'worker-tax',
    halfOpenMaxMs: cfg.TAX_RECONCILE_PROBE_MAX_MS,
    window: { value: cfg.TAX_RECONCILE_BREAKER_WINDOW_CALLS, name: 'TAX_RECONCILE_BREAKER_WINDOW_CALLS' },
    minCalls: { value: cfg.TAX_RECONCILE_BREAKER_MIN_CALLS, name: 'TAX_RECONCILE_BREAKER_MIN_CALLS' },
    probedElsewhere: signal => laneProbing(o.laneDb?.(), laneTtlMs, signal),
  })
  return [{
    type: JOB_NAMES.taxReconcile,
    lane: 'tax',
    queue: QUEUES.taxReconcile,
    idempotent: true,
    held: () => breaker !== undefined && !breaker.closed,
    breakers: breaker ? [breaker] : [],
    async run (payload, ctx) {
      // A worker that stops (or loses the job's lease) does not wait out the pace.
      ctx.signal.throwIfAborted()
      await Promise.race([paced(), once(ctx.signal, 'abort')])
      ctx.signal.throwIfAborted()
      const db = ctx.db!
      const { rows } = await db.query<{
        jurisdiction: string, amount: string, currency: string, rate: string, tax: string, reconciled_at: Date | null
      }>(
        'select jurisdiction, amount, currency, rate, tax, reconciled_at from tax.quotes where id = $1', [payload.quoteId])
      const q = rows[0]
      if (!q) throw new FatalJobError(`quote ${String(payload.quoteId)} does not exist`)
      if (q.reconciled_at) return { already: true }
      try {
        const body = { jurisdiction: q.jurisdiction, amount: { value: Number(q.amount), currency: q.currency } }
        const ask = (signals: AbortSignal[]) =>
          quoteFromProvider(provider, body, { deadlineMs: 5_000, signals: [ctx.signal, ...signals], caller: { process: 'worker-tax' } })
        const p = breaker ? await breaker.call(opened => ask([opened])) : await ask([])
        const trueTax = Math.round(Number(q.amount) * p.rate)
        await db.query('update tax.quotes set reconciled_rate = $2, reconciled_tax = $3, reconciled_at = now() where id = $1 and reconciled_at is null', [payload.quoteId, p.rate, trueTax])
        return { rate: p.rate, tax: trueTax, difference: trueTax - Number(q.tax) }
      } catch (err) {
        if (err instanceof ProviderError && err.kind === 'unknown_jurisdiction') throw new FatalJobError(err.message)
        if (err instanceof BreakerOpenError) throw new DeferJobError(err.message)
        throw err // retried with backoff until the provider answers
      }
    },
  }]
}

/**
 * Whether a live tax lane replica's breaker is open or probing and none's is
 * closed. No rows (a lane with a fixed share does not register, or none runs),
 * no pool, a failed or slow read: false, and the worker probes on its own.
 */
async function laneProbing (db: pg.Pool | undefined, ttlMs: number, signal: AbortSignal): Promise<boolean> {
  if (!db) return false
  const read = db.query<{ probing: boolean }>(
    `select coalesce(bool_or(breaker <> 'closed') and not bool_or(breaker = 'closed'), false) as probing
     from tax.lane_replicas where breaker is not null and heartbeat_at > now() - make_interval(secs => $1 / 1000.0)`,
    [ttlMs]).then(r => r.rows[0]?.probing === true, () => false)
  return await Promise.race([read, once(signal, 'abort').then(() => false)])
}
