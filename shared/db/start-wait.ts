// How a process waits for its database at start. A role whose CONNECTION LIMIT
// is full (PostgreSQL 53300) is waited for like a server that is not up yet:
// its connections come back as the processes holding them stop (a rollout's
// old replica, the backends of a killed one the server has not ended yet). A
// process that died of it instead was restarted by its orchestrator into the
// same refusal, a stack trace each time, saying neither which limit nor what to
// change. So the first refusal of each role is said once, as a warning naming
// the limit, who it is for and what to change; still refused when the start
// budget runs out, the start ends with ERR_DB_ROLE_LIMIT_REACHED in the same
// words (shared/start-failure.ts prints it). The limit named is the lane
// table's (shared/lanes.ts), from which migrate set the role's.
import { AppError } from '../errors.ts'
import { DECK_ROLE, envPrefix, type LaneLimits } from '../lanes.ts'
import { retrying, START_BUDGET_MS, type StartRetry } from './pool.ts'

/** A role's CONNECTION LIMIT as a process connecting as it sees it. */
export interface RoleBudget {
  readonly role: string
  readonly limit: number
  /** Who the limit is for, with the variables that split it. */
  readonly heldBy: string
  /** What to change when it stays full. */
  readonly change: string
}

export interface StartLog { warn (o: object, m: string): void }

/** Before a process has its logger: one JSON line on stderr, as its fatal line will be. */
const stderrLog = (name: string): StartLog => ({ warn: (o, m) => console.error(JSON.stringify({ level: 'warn', name, ...o, msg: m })) })

const ROLE_FULL = '53300'
const isRoleFull = (err: unknown): boolean => (err as { code?: unknown } | null)?.code === ROLE_FULL

/** One start's budget: every first use of a role retries within what is left of it. */
export class StartBudget {
  readonly ms: number
  readonly #until: number
  readonly #variable: string
  readonly #log: StartLog
  readonly #warned = new Set<string>()

  constructor (o: { name: string, ms?: number, variable?: string, log?: StartLog }) {
    this.ms = o.ms ?? START_BUDGET_MS
    this.#until = Date.now() + this.ms
    this.#variable = o.variable ? ` (${o.variable})` : ''
    this.#log = o.log ?? stderrLog(o.name)
  }

  /** retrying() of a first use of `b.role`, for what is left of the budget. */
  for (b: RoleBudget): StartRetry {
    return async <T>(fn: () => Promise<T>): Promise<T> => {
      const attempt = (): Promise<T> => fn().catch((err: unknown) => {
        if (isRoleFull(err)) this.#full(b)
        throw err
      })
      try {
        return await retrying(attempt, Math.max(0, this.#until - Date.now()))
      } catch (err) {
        if (!isRoleFull(err)) throw err
        throw new AppError('ERR_DB_ROLE_LIMIT_REACHED', {
          detail: `role ${b.role} is still at its CONNECTION LIMIT of ${b.limit} (${b.heldBy}) after the start budget of ${this.ms} ms${this.#variable}: ${b.change}`,
          cause: err,
        })
      }
    }
  }

  #full (b: RoleBudget): void {
    if (this.#warned.has(b.role)) return
    this.#warned.add(b.role)
    this.#log.warn({ code: 'ERR_DB_ROLE_LIMIT_REACHED', role: b.role, limit: b.limit, startBudgetMs: this.ms },
      `role ${b.role} is at its CONNECTION LIMIT of ${b.limit} (${b.heldBy}): PostgreSQL refused a connection (53300); waiting for one to come back, up to ${this.ms} ms${this.#variable}. If it stays full: ${b.change}`)
  }
}

const rerunMigrate = 'and re-run migrate, which sets the limit'

/** A lane replica: its role's limit is split between the lane's replicas and the workers running its jobs. */
export function laneRoleBudget (l: LaneLimits): RoleBudget {
  const p = envPrefix(l.lane)
  const workers = `${l.db.workerPoolMax} for its jobs in the workers (${p}WORKER_POOL_MAX)`
  if (l.db.replicas === 0) {
    return {
      role: l.db.role,
      limit: l.db.roleConnectionLimit,
      heldBy: `${p}POOL_MAX: ${l.db.replicaBudget} shared by the ${l.lane} replicas that run, ${workers}`,
      change: `look for connections of ${l.db.role} that no running replica holds (pg_stat_activity), run fewer ${l.lane} replicas, or raise ${p}POOL_MAX ${rerunMigrate}`,
    }
  }
  const share = Math.floor(l.db.replicaBudget / l.db.replicas)
  return {
    role: l.db.role,
    limit: l.db.roleConnectionLimit,
    heldBy: `${p}POOL_MAX: ${share} for each of ${p}REPLICAS=${l.db.replicas} ${l.lane} replicas, ${workers}`,
    change: `set ${p}REPLICAS to the number of ${l.lane} replicas that run (or 0: shares follow the live replicas), or raise ${p}POOL_MAX ${rerunMigrate}`,
  }
}

/** A worker running a lane's jobs opens a pool of the lane's role, out of what the lane's replicas leave. */
export function workerLaneRoleBudget (l: LaneLimits, poolMax: number): RoleBudget {
  const p = envPrefix(l.lane)
  return {
    role: l.db.role,
    limit: l.db.roleConnectionLimit,
    heldBy: `${p}POOL_MAX: the ${l.lane} replicas leave ${p}WORKER_POOL_MAX of it to the workers running its jobs; this worker opens ${poolMax}`,
    change: `raise ${p}WORKER_POOL_MAX on the ${l.lane} lane to cover every worker serving its queues, or raise ${p}POOL_MAX ${rerunMigrate}`,
  }
}

/** A worker's queue pool and LISTEN connection: jobs_ds is shared by every worker process. */
export function jobsRoleBudget (o: { role: string, limit: number, replicas: number, poolMax: number }): RoleBudget {
  return {
    role: o.role,
    limit: o.limit,
    heldBy: `JOBS_POOL_MAX, shared by WORKER_REPLICAS=${o.replicas} worker processes of ${o.poolMax} + 1 LISTEN each`,
    change: `set WORKER_REPLICAS to the number of worker processes that run (each takes floor(JOBS_POOL_MAX / WORKER_REPLICAS)), or raise JOBS_POOL_MAX ${rerunMigrate}`,
  }
}

/** The deck's role is one deck's pool. */
export function deckRoleBudget (role: string): RoleBudget {
  return { role, limit: DECK_ROLE.poolMax, heldBy: 'one deck\'s pool, fixed by DECK_ROLE in shared/lanes.ts', change: 'run one deck process' }
}
