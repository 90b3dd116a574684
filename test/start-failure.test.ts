// How a long-running process's start ends when it cannot start, through the
// real entry (`main.js worker`, `main.js fraud`, ...) as child processes on a
// real PostgreSQL. A process that starts while its role's CONNECTION LIMIT is
// full (53300: a rollout's old replica, or a killed process's backends, still
// hold it) waits instead of dying: found on the Compose stack, where the worker
// died of an uncaught 53300 with a stack trace and its restart policy looped it.
// It says so once, naming the role, its limit from the lane table and the
// variable to change, and comes up once a connection is free (the limit is
// filled by connections this test holds); still refused when its start budget
// ends, it exits with one line. Any other failed start (a bad setting, a refused
// password, a port in use, an unreachable database) is one line too, saying what
// to change, and never a stack trace (shared/start-failure.ts).
import { spawn } from 'node:child_process'
import net from 'node:net'
import readline from 'node:readline'
import pg from 'pg'
import t, { type Test } from 'tap'
import { testDatabase, type TestDb } from './helpers/db.ts'
import { call, eventually } from './helpers/http.ts'
import { compiled, laneEnv, ROOT } from './helpers/procs.ts'
import { createQueue } from './helpers/queue.ts'
import { startFailure } from '../shared/start-failure.ts'

interface Run { out: string[], err: string[], exit: { code: number | null } | undefined, stop (): Promise<void> }

/**
 * `main.js <args>` with its stdout and stderr kept apart and readable while it
 * starts (test/helpers/procs.ts's startProcess hands them over only once the
 * process listens). Its exit is recorded on 'close', once both streams are read
 * to the end, so a last line is never missed. Stopped at teardown, on failure too.
 */
function run (t: Test, name: string, args: string[], env: Record<string, string>): Run {
  const proc = spawn(process.execPath, ['--expose-gc', compiled('services/main.ts'), ...args], {
    cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  })
  const closed = new Promise<void>(resolve => proc.once('close', code => { r.exit = { code }; resolve() }))
  const kill = (): void => { if (r.exit === undefined) proc.kill('SIGKILL') }
  process.once('exit', kill)
  const r: Run = {
    out: [],
    err: [],
    exit: undefined,
    async stop () {
      if (r.exit === undefined) {
        proc.kill('SIGTERM')
        setTimeout(kill, 10_000).unref()
      }
      await closed
    },
  }
  readline.createInterface({ input: proc.stdout! }).on('line', l => r.out.push(l))
  readline.createInterface({ input: proc.stderr! }).on('line', l => r.err.push(l))
  t.teardown(async () => {
    if (!t.passing()) t.comment(`--- ${name} stdout ---\n${r.out.slice(-20).join('\n')}\n--- ${name} stderr ---\n${r.err.slice(-20).join('\n')}`)
    await r.stop()
    process.off('exit', kill)
  })
  return r
}

/**
 * A TCP proxy to PostgreSQL counting the connections made through it: each
 * connection attempt of the process is one.
 */
async function countingProxy (t: Test, to: URL): Promise<{ url (role: string): string, readonly accepted: number }> {
  let accepted = 0
  const open = new Set<net.Socket>()
  const server = net.createServer(client => {
    accepted++
    const upstream = net.connect(Number(to.port), to.hostname)
    for (const s of [client, upstream]) open.add(s)
    const close = (): void => { for (const s of [client, upstream]) { s.destroy(); open.delete(s) } }
    client.pipe(upstream).on('error', close).once('close', close)
    upstream.pipe(client).on('error', close).once('close', close)
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => { for (const s of open) s.destroy(); server.close(() => resolve()) }))
  const port = (server.address() as net.AddressInfo).port
  return {
    url: (roleUrl: string) => { const u = new URL(roleUrl); u.host = `127.0.0.1:${port}`; return u.toString() },
    get accepted () { return accepted },
  }
}

/** Every connection the role's CONNECTION LIMIT allows, held by the test; the next one is refused. */
async function fillRole (t: Test, db: TestDb, role: string): Promise<{ limit: number, release (): Promise<void> }> {
  const [row] = await db.query<{ limit: number }>('select rolconnlimit as limit from pg_roles where rolname = $1', [role])
  const limit = row!.limit
  const held: pg.Client[] = []
  const release = async (): Promise<void> => { await Promise.all(held.splice(0).map(c => c.end().catch(() => {}))) }
  t.teardown(release)
  for (let i = 0; i < limit; i++) {
    const c = new pg.Client({ connectionString: db.roleUrl(role), application_name: 'start-role-budget-holder' })
    await c.connect()
    held.push(c)
  }
  const one = new pg.Client({ connectionString: db.roleUrl(role) })
  await t.rejects(one.connect(), { code: '53300' }, `${role}'s ${limit} connections are all held: the next is refused`)
  return { limit, release }
}

// pino writes its levels as numbers; the lines written before a logger exists, as names.
const LEVELS: Record<string, number> = { warn: 40, fatal: 60 }
/** The JSON lines of a stream at one level. */
const linesAt = (lines: string[], level: 'warn' | 'fatal'): Array<Record<string, unknown>> => lines.flatMap(l => {
  try {
    const o = JSON.parse(l) as Record<string, unknown>
    return o.level === level || o.level === LEVELS[level] ? [o] : []
  } catch { return [] }
})
const roleFullWarnings = (r: Run): Array<Record<string, unknown>> => [...linesAt(r.out, 'warn'), ...linesAt(r.err, 'warn')].filter(o => o.code === 'ERR_DB_ROLE_LIMIT_REACHED')
const stackFrames = (r: Run): string[] => [...r.out, ...r.err].filter(l => /^\s{4}at /.test(l))
const listening = (r: Run): string | undefined => r.out.map(l => /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(l)?.[1]).find(Boolean)

const db = await testDatabase(t)
await createQueue(db, 'start-q', 1)
const jobsRole = db.prefix + 'jobs_ds'
const workerEnv = (url: string, extra: Record<string, string> = {}): Record<string, string> =>
  ({ ...db.env, DATABASE_URL: url, WORKER_QUEUES: 'start-q', WORKER_PORT: '0', ...extra })

/**
 * The process meets its role full, says so once and keeps retrying (the proxy
 * sees its new connections) without exiting; released, it comes up.
 */
async function waitsThenComesUp (
  t: Test, o: { role: string, start: (url: string) => Run, says: RegExp[] }
): Promise<void> {
  const full = await fillRole(t, db, o.role)
  const proxy = await countingProxy(t, new URL(db.superUrl))
  const p = o.start(proxy.url(db.roleUrl(o.role)))

  t.ok(await eventually(async () => roleFullWarnings(p).length > 0 || p.exit !== undefined, 60_000), 'it warns that the role is full')
  const seen = proxy.accepted
  t.ok(await eventually(async () => proxy.accepted >= seen + 3 || p.exit !== undefined, 60_000), `and keeps retrying (${proxy.accepted - seen} more connection attempts since)`)
  t.equal(p.exit, undefined, 'without exiting while the role is full')
  const warned = roleFullWarnings(p)
  t.equal(warned.length, 1, 'one warning for all its refusals')
  t.match(warned[0], { role: o.role, limit: full.limit }, 'naming the role and its limit')
  for (const re of o.says) t.match(String(warned[0]?.msg), re, `the warning says ${re}`)

  await full.release()
  const url = await eventually(async () => listening(p) ?? (p.exit !== undefined ? 'exited' : undefined), 60_000)
  t.ok(url?.startsWith('http://'), `once the connections are released it listens (${url})`)
  if (!url?.startsWith('http://')) return
  t.ok(await eventually(async () => (await call(`${url}/health/ready`).catch(() => ({ status: 0 }))).status === 200, 30_000), '/health/ready answers 200')
  t.equal(roleFullWarnings(p).length, 1, 'still the one warning')
  t.same(stackFrames(p), [], 'no stack trace')
  await p.stop()
}

t.test('a worker whose jobs_ds budget is full waits, warns once, and comes up once a connection is free', async t => {
  await waitsThenComesUp(t, {
    role: jobsRole,
    start: url => run(t, 'worker', ['worker'], workerEnv(url, { WORKER_START_BUDGET_MS: '120000' })),
    says: [/CONNECTION LIMIT of 10/, /JOBS_POOL_MAX/, /WORKER_REPLICAS=1/, /WORKER_START_BUDGET_MS/],
  })
})

t.test('a lane whose role budget is full waits, warns once, and comes up once a connection is free', async t => {
  await waitsThenComesUp(t, {
    role: db.prefix + 'fraud_ds',
    start: url => run(t, 'fraud', ['fraud'], laneEnv('fraud', db.env, url)),
    says: [/CONNECTION LIMIT of 15/, /shared by the fraud replicas that run/, /FRAUD_POOL_MAX/, /FRAUD_WORKER_POOL_MAX/],
  })
})

t.test('a worker still refused when its start budget ends exits non-zero with one line, no stack trace', async t => {
  const full = await fillRole(t, db, jobsRole)
  const w = run(t, 'worker-gives-up', ['worker'], workerEnv(db.roleUrl(jobsRole), { WORKER_START_BUDGET_MS: '1500' }))
  t.ok(await eventually(async () => w.exit !== undefined, 60_000), 'it exits')
  t.not(w.exit?.code, 0, `with a non-zero exit code (${w.exit?.code})`)
  const fatal = linesAt(w.err, 'fatal')
  t.equal(fatal.length, 1, 'one fatal line on stderr')
  t.match(fatal[0], { name: 'worker', code: 'ERR_DB_ROLE_LIMIT_REACHED' })
  for (const re of [new RegExp(`role ${jobsRole} is still at its CONNECTION LIMIT of ${full.limit}`), /WORKER_REPLICAS/, /JOBS_POOL_MAX/, /WORKER_START_BUDGET_MS/]) {
    t.match(String(fatal[0]?.msg), re, `it says ${re}`)
  }
  t.equal(roleFullWarnings(w).length, 1, 'after the one warning')
  t.same(stackFrames(w), [], 'no stack trace')
  t.same(w.err.filter(l => linesAt([l], 'warn').length + linesAt([l], 'fatal').length === 0), [], 'stderr holds nothing but those two lines')
})

// The boundary (shared/start-failure.ts) on the errors a start meets for real.
t.test('each known start failure is one line that says what to change', async t => {
  const closedPort = await new Promise<number>(resolve => { const s = net.createServer().listen(0, '127.0.0.1', () => { const p = (s.address() as net.AddressInfo).port; s.close(() => resolve(p)) }) })
  const refusal = async (url: string): Promise<unknown> =>
    new pg.Client({ connectionString: url }).connect().then(() => undefined, (err: unknown) => err)

  const down = `postgres://someone:s3cret@127.0.0.1:${closedPort}/wt`
  const unreachable = startFailure('worker', await refusal(down), { DATABASE_URL: db.roleUrl(jobsRole), FRAUD_DATABASE_URL: down })
  t.match(unreachable, { code: 'ERR_DB_UNREACHABLE', msg: new RegExp(`127\\.0\\.0\\.1:${closedPort} \\(FRAUD_DATABASE_URL\\) was unreachable`) }, 'unreachable: the host, port and variable of the URL that did not answer')
  t.notMatch(unreachable.msg, /s3cret/, 'never the password')

  const wrong = new URL(db.roleUrl(jobsRole)); wrong.password = 'not-its-password'
  const auth = startFailure('worker', await refusal(wrong.toString()), { ...db.env, DATABASE_URL: wrong.toString() })
  t.match(auth, { code: 'ERR_DB_AUTH_FAILED', msg: new RegExp(`role ${jobsRole} \\(28P01\\): the password in DATABASE_URL .*PG_ROLE_PASSWORD_JOBS_DS`) }, 'a refused password: the role, its URL and migrate\'s password variable')
  t.notMatch(auth.msg, /not-its-password/, 'never the password')

  const full = await fillRole(t, db, db.prefix + 'tax_ds')
  const roleFull = startFailure('tax', await refusal(db.roleUrl(db.prefix + 'tax_ds')), db.env)
  t.match(roleFull, { code: 'ERR_DB_ROLE_LIMIT_REACHED', msg: new RegExp(`role ${db.prefix}tax_ds is at its CONNECTION LIMIT of ${full.limit}.*REPLICAS`) }, 'a role full outside a start budget: its limit from the lane table')
  await full.release()

  t.match(startFailure('card-auth', new Error('ERR_SHARED_FAILURE_DOMAIN_DETECTED: pool connects as x, expected y')), { code: 'ERR_SHARED_FAILURE_DOMAIN_DETECTED', msg: 'pool connects as x, expected y' }, 'a code the message starts with')
  t.match(startFailure('worker', Object.assign(new Error('no such file'), { code: 'ENOENT' })), { code: 'ENOENT', msg: 'start failed: no such file', where: /start-failure\.test\.ts/ }, 'an unknown error: its code, its message and where it was thrown')
  t.match(startFailure('worker', new Error('boom')), { code: 'ERR_INTERNAL', msg: 'start failed: boom' }, 'one without a code: ERR_INTERNAL')
})

t.test('a start that fails ends the process with one line, exit code 1, no stack trace', async t => {
  const held = net.createServer()
  await new Promise<void>(resolve => held.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => held.close(() => resolve())))
  const heldPort = String((held.address() as net.AddressInfo).port)
  const wrong = new URL(db.roleUrl(jobsRole)); wrong.password = 'not-its-password'
  const cases: Array<{ what: string, args: string[], env: Record<string, string>, code: string, says: RegExp }> = [
    { what: 'a bad setting', args: ['worker'], env: workerEnv(db.roleUrl(jobsRole), { WORKER_SLOTS: 'many' }), code: 'ERR_CONFIG_INVALID', says: /WORKER_SLOTS must be an integer in decimal digits/ },
    { what: 'a refused password', args: ['worker'], env: workerEnv(wrong.toString(), { WORKER_START_BUDGET_MS: '0' }), code: 'ERR_DB_AUTH_FAILED', says: /PG_ROLE_PASSWORD_JOBS_DS/ },
    { what: 'a bad breaker setting of the tax lane', args: ['tax'], env: { ...db.env, DATABASE_URL: db.laneUrl('tax'), TAX_PORT: '0', TAX_BREAKER_FAILURE_RATE: '1.5' }, code: 'ERR_CONFIG_INVALID', says: /TAX_BREAKER_FAILURE_RATE must be < 1/ },
    { what: 'a breaker of worker-tax that could never open', args: ['worker'], env: workerEnv(db.roleUrl(jobsRole), { WORKER_QUEUES: 'tax-reconcile', TAX_DATABASE_URL: db.laneUrl('tax'), TAX_RECONCILE_BREAKER_MIN_CALLS: '50' }), code: 'ERR_CONFIG_INVALID', says: /TAX_RECONCILE_BREAKER_MIN_CALLS \(50\) must not exceed TAX_RECONCILE_BREAKER_WINDOW_CALLS \(5\)/ },
    { what: 'a fairness weight of 0', args: ['card-auth'], env: { ...db.env, DATABASE_URL: db.laneUrl('card-auth'), CARD_AUTH_PORT: '0', CARD_AUTH_FAIR_WEIGHTS: 'm_gold=4,m_off=0' }, code: 'ERR_CONFIG_INVALID', says: /CARD_AUTH_FAIR_WEIGHTS gives m_off a weight of 0: a weight must be above 0/ },
    { what: 'a fairness reserve of every permit', args: ['fraud'], env: { ...db.env, DATABASE_URL: db.laneUrl('fraud'), FRAUD_PORT: '0', FRAUD_FAIR_RESERVE: '30' }, code: 'ERR_CONFIG_INVALID', says: /FRAUD_FAIR_RESERVE \(30\) must be below FRAUD_PERMITS \(30\)/ },
    { what: 'a tracing sampler that does not exist', args: ['card-auth'], env: { ...db.env, DATABASE_URL: db.laneUrl('card-auth'), CARD_AUTH_PORT: '0', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_TRACES_SAMPLER: 'sometimes' }, code: 'ERR_CONFIG_INVALID', says: /OTEL_TRACES_SAMPLER/ },
    { what: 'a port in use', args: ['tax-sandbox'], env: { TAX_SANDBOX_PORT: heldPort }, code: 'ERR_PORT_IN_USE', says: new RegExp(`port ${heldPort} is already in use \\(TAX_SANDBOX_PORT\\)`) },
  ]
  for (const c of cases) {
    const p = run(t, c.what, c.args, c.env)
    t.ok(await eventually(async () => p.exit !== undefined, 60_000), `${c.what}: the process exits`)
    t.equal(p.exit?.code, 1, `${c.what}: exit code 1`)
    const fatal = linesAt(p.err, 'fatal')
    t.equal(fatal.length, 1, `${c.what}: one fatal line`)
    t.match(fatal[0], { code: c.code, msg: c.says }, `${c.what}: ${c.code}, saying what to change`)
    t.same(stackFrames(p), [], `${c.what}: no stack trace`)
  }
})
