// How a long-running process's failed start ends: one JSON line on stderr with
// a stable code, what went wrong and what to do, then exit code 1. Never a stack
// trace: under a restart policy it repeats on every restart and names neither
// the variable nor the limit an operator has to change. services/main.ts is the
// boundary (every `main.js <process>` start goes through it); a lane and the
// deck, which close their app first, end through it too. Known codes get their
// own words; any other error still ends in one line, with its message and code.
import { isAppError } from './errors.ts'
import { FLEET } from './fleet.ts'
import { dbRoles } from './lanes.ts'

export interface StartFailure { readonly code: string, readonly msg: string, readonly where?: string }

type Env = Record<string, string | undefined>

interface ErrLike {
  code?: unknown, message?: unknown, stack?: unknown, port?: unknown, hostname?: unknown, errors?: unknown[]
}

// Node's codes for a server that did not answer (ECONNREFUSED also as the
// AggregateError of a name with several addresses), and PostgreSQL's for one
// starting up or shutting down.
const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNRESET', '57P03'])

export function startFailure (name: string, err: unknown, env: Env = process.env): StartFailure {
  if (isAppError(err)) return { code: err.code, msg: err.message }
  const e = (typeof err === 'object' && err !== null ? err : {}) as ErrLike
  const code = typeof e.code === 'string' ? e.code : undefined
  const message = typeof e.message === 'string' && e.message !== '' ? e.message : (code ?? String(err))
  // A code at the head of the message (ERR_SHARED_FAILURE_DOMAIN_DETECTED from assertRole).
  const coded = /^(ERR_[A-Z_]+): ([\s\S]+)$/.exec(message)
  if (coded) return { code: coded[1]!, msg: coded[2]! }
  if (code === '53300') return roleFull(message, env)
  if (code === '28P01') return authFailed(message, env)
  if (code === 'EADDRINUSE') return portInUse(name, e)
  if ((code !== undefined && UNREACHABLE.has(code)) || (code === undefined && /timeout|Connection terminated/i.test(message))) {
    const unreachable = dbUnreachable(e, message, env)
    if (unreachable) return unreachable
  }
  return { code: code ?? 'ERR_INTERNAL', msg: `start failed: ${message}`, ...firstFrame(e.stack) }
}

/** Prints the failed start's one line and exits. */
export function failStart (name: string, err: unknown, env: Env = process.env): never {
  console.error(JSON.stringify({ level: 'fatal', name, ...startFailure(name, err, env) }))
  process.exit(1)
}

/**
 * The connection strings this process was given: DATABASE_URL and the lanes'
 * <LANE>_DATABASE_URL, never with their passwords.
 */
function dbUrls (env: Env): Array<{ variable: string, host: string, port: string, user: string }> {
  const out = []
  for (const [variable, v] of Object.entries(env)) {
    if (!v || !(variable === 'DATABASE_URL' || variable.endsWith('_DATABASE_URL'))) continue
    try {
      const u = new URL(v)
      out.push({ variable, host: u.hostname, port: u.port || '5432', user: decodeURIComponent(u.username) })
    } catch { /* not a URL: nothing to name */ }
  }
  return out
}

const names = (urls: Array<{ variable: string }>): string => urls.map(u => u.variable).join(', ')

function dbUnreachable (e: ErrLike, message: string, env: Env): StartFailure | undefined {
  const urls = dbUrls(env)
  const inner = (e.errors?.[0] ?? {}) as ErrLike
  const port = e.port ?? inner.port
  const match = urls.filter(u => (port === undefined || String(port) === u.port) && (typeof e.hostname !== 'string' || e.hostname === u.host))
  const at = match[0]
  if (!at) return undefined
  return {
    code: 'ERR_DB_UNREACHABLE',
    msg: `the database at ${at.host}:${at.port} (${names(match)}) was unreachable until the start budget ran out: ${message}; check that PostgreSQL runs and accepts connections there, and that ${names(match)} names its host and port`,
  }
}

function authFailed (message: string, env: Env): StartFailure {
  const role = /for user "([^"]+)"/.exec(message)?.[1] ?? 'its role'
  const urls = dbUrls(env).filter(u => u.user === role)
  const where = urls.length > 0 ? names(urls) : 'DATABASE_URL'
  const passwordVar = `PG_ROLE_PASSWORD_${role.slice((env.ROLE_PREFIX ?? '').length).toUpperCase()}`
  return {
    code: 'ERR_DB_AUTH_FAILED',
    msg: `PostgreSQL refused the password of role ${role} (28P01): the password in ${where} must be the one migrate gave the role from ${passwordVar}; fix ${where}, or re-run migrate if the role does not exist yet`,
  }
}

/**
 * A 53300 no start budget caught (one with a budget is
 * ERR_DB_ROLE_LIMIT_REACHED already): its limit from the lane table.
 */
function roleFull (message: string, env: Env): StartFailure {
  const role = /for role "([^"]+)"/.exec(message)?.[1] ?? 'its role'
  let limit: number | undefined
  try {
    limit = dbRoles(env).find(r => r.role === role)?.connectionLimit
  } catch { /* a bad lane setting: say no number */ }
  return {
    code: 'ERR_DB_ROLE_LIMIT_REACHED',
    msg: `role ${role} is at its CONNECTION LIMIT${limit === undefined ? '' : ` of ${limit}`}: PostgreSQL refused a connection (53300); more processes connect as ${role} than the limit allows: set the REPLICAS of the processes using it (<LANE>_REPLICAS, WORKER_REPLICAS) to how many run, or raise its limit (<LANE>_POOL_MAX, JOBS_POOL_MAX) and re-run migrate`,
  }
}

function portInUse (name: string, e: ErrLike): StartFailure {
  const variable = FLEET.find(p => p.entry === name)?.portEnv ?? 'its port variable'
  const port = typeof e.port === 'number' ? String(e.port) : '(unknown)'
  return { code: 'ERR_PORT_IN_USE', msg: `port ${port} is already in use (${variable}): another process listens there; stop it, or set ${variable} to a free port` }
}

/** Where an unknown error was thrown, as one field: enough to find it, not a stack trace. */
function firstFrame (stack: unknown): { where?: string } {
  const frame = typeof stack === 'string' ? /\n\s+at (.+)/.exec(stack)?.[1] : undefined
  return frame ? { where: frame } : {}
}
