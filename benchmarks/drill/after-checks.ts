// After the load, the database is asked whether any authorization was lost,
// doubled or written though refused, and whether any role holds orphaned
// connections.
import type pg from 'pg'
import { DECK_ROLE, JOBS_ROLE, LANE_DEFAULTS, LANE_NAMES } from '../../shared/lanes.ts'
import { sleep } from '../run-info.ts'

export interface Ledger { acknowledged: number, lost: number, doubled: number, phantom: number }

/** The run's card authorizations in the database against what the gateway answered. */
export async function checkLedger (
  db: pg.Client, runId: string, card: { acknowledged: Map<string, string>, refused: Set<string> }
): Promise<Ledger> {
  const rows = await db.query<{ idempotency_key: string, n: string, ids: string[], approved: string, holds: string }>(
    `select a.idempotency_key, count(distinct a.id) n, array_agg(distinct a.id::text) ids,
            count(distinct a.id) filter (where a.status = 'approved') approved, count(h.id) holds
       from card_auth.authorizations a left join card_auth.holds h on h.authorization_id = a.id
      where a.idempotency_key like $1 group by a.idempotency_key`, [`drill-${runId}-c-%`])
  const inDb = new Map(rows.rows.map(r => [r.idempotency_key, r]))
  const lost = [...card.acknowledged].filter(([key, id]) => !inDb.get(key)?.ids.includes(id)).length
  const doubled = rows.rows.filter(r => Number(r.n) > 1 || Number(r.holds) !== Number(r.approved)).length
  const phantom = [...card.refused].filter(key => inDb.has(key)).length
  return { acknowledged: card.acknowledged.size, lost, doubled, phantom }
}

export interface StuckBackend {
  pid: number, state: string | null, since: string | null, waitEvent: string | null, query: string
}

export interface RoleConnections {
  role: string
  limit: number
  total: number
  active: number
  idle: number
  idleInTransaction: number
  orphaned: number
  stuck: StuckBackend[]
}

interface Backend {
  pid: number, role: string, state: string | null, state_change: string | null, wait_event: string | null, query: string
}

/** Every role of the fleet: its backends, its limit, and those orphaned. */
export async function checkConnections (db: pg.Client): Promise<RoleConnections[]> {
  const roles = [...LANE_NAMES.map(l => LANE_DEFAULTS[l].role), JOBS_ROLE.role, DECK_ROLE.role]
    .map(r => (process.env.ROLE_PREFIX ?? '') + r)
  // Orphaned: a backend that is still busy (active, or idle in a transaction) in
  // two looks 5 s apart without its state having changed: nothing is running
  // any more, so nothing should be holding it.
  const first = await census(db, roles)
  await sleep(5_000)
  const second = await census(db, roles)
  const stuck = second.filter(b => busy(b) &&
    first.some(f => f.pid === b.pid && f.state === b.state && f.state_change === b.state_change))
  const { rows } = await db.query<{ rolname: string, rolconnlimit: number }>(
    'select rolname, rolconnlimit from pg_roles where rolname = any($1)', [roles])
  const limits = new Map(rows.map(r => [r.rolname, r.rolconnlimit]))
  return roles.filter(r => limits.has(r)).map(role => roleConnections(role, limits.get(role)!, second, stuck))
}

async function census (db: pg.Client, roles: string[]): Promise<Backend[]> {
  return (await db.query<Backend>(
    `select pid, usename as role, state, state_change::text, wait_event, left(query, 120) as query from pg_stat_activity
      where usename = any($1) and pid <> pg_backend_pid()`, [roles])).rows
}

const inTransaction = (b: Backend): boolean => (b.state ?? '').startsWith('idle in transaction')
const busy = (b: Backend): boolean => b.state === 'active' || inTransaction(b)

function roleConnections (role: string, limit: number, backends: Backend[], stuck: Backend[]): RoleConnections {
  const mine = backends.filter(b => b.role === role)
  const stuckHere = stuck.filter(b => b.role === role)
  return {
    role,
    limit,
    total: mine.length,
    active: mine.filter(b => b.state === 'active').length,
    idle: mine.filter(b => b.state === 'idle').length,
    idleInTransaction: mine.filter(inTransaction).length,
    orphaned: stuckHere.length,
    stuck: stuckHere.map(b => ({
      pid: b.pid,
      state: b.state,
      since: b.state_change,
      waitEvent: b.wait_event,
      query: b.query,
    })),
  }
}
