// `npm start`: the whole fleet on one machine. The fleet compiled to JavaScript,
// embedded PostgreSQL (unless DATABASE_URL), migrations and lane roles, demo data
// and a local API key, the tax table certified (or no start), then every process
// as its own child, restarted with backoff if it dies. On SIGINT/SIGTERM/SIGHUP
// or an error of its own the gateway drains first, then the lanes, then
// PostgreSQL; whatever is still running when the supervisor exits is killed.
import fs from 'node:fs'
import path from 'node:path'
import { loadConfig } from '../../shared/config.ts'
import { fleetProcess, NICE } from '../../shared/fleet.ts'
import { bootstrapDatabase, localSecrets } from '../../shared/db/bootstrap.ts'
import { startBackendPriorities } from './backend-priorities.ts'
import { isEmbeddedStartError } from '../../shared/db/embedded.ts'
import { deckRoleName, jobsRoleName, LANE_DEFAULTS, LANE_NAMES, LANE_QUEUES, envPrefix, laneLimits, laneUrl as laneUrlOf } from '../../shared/lanes.ts'
import { idleTrimMs, startIdleTrim } from '../../shared/idle-trim.ts'
import { onShutdown, SUPERVISOR_KILL_AFTER_MS } from '../../shared/lifecycle.ts'
import { createKey, hashKey, readKeyFile } from '../../shared/api-keys.ts'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { buildFleet, fleetEntry, ROOT } from './build.ts'
import { nodeArgsVar, SUPERVISOR_ENV, WORKER_LANES as workerLanes } from './config.ts'
import { SupervisedChild, waitHealthy, type ChildSpec } from './child.ts'
import { describeConflicts, portConflicts } from './ports.ts'

const cfg = loadConfig(SUPERVISOR_ENV, process.env)
// Checked here before any child: a bad value would stop each of them at its start, over and over.
startIdleTrim({ idleMs: idleTrimMs(process.env) })
const nodeArgs = (child: string): string[] => [cfg.FLEET_NODE_ARGS, (cfg as Record<string, unknown>)[nodeArgsVar(child)] as string].flatMap(s => s.split(' ').filter(Boolean))
// Decided once, here: children inherit this terminal, so each would see a TTY
// of its own. Pretty lines for a person at a terminal, JSON lines otherwise
// (a pipe, a file, a test); LOG_FORMAT set by hand wins. Children inherit it
// through the environment (child.ts spawns with process.env).
process.env.LOG_FORMAT = cfg.LOG_FORMAT ?? (process.stdout.isTTY ? 'pretty' : 'json')

const dataDir = path.resolve(cfg.DATA_DIR)
const say = (m: string): void => { process.stdout.write(`[supervisor] ${m}\n`) }
// What the supervisor has started, for every way it can end (see `stopAll` and the 'exit' hook below).
const children: SupervisedChild[] = []
const owned: { stopDatabase?: () => Promise<void>, stopBackendPriorities?: () => Promise<void> } = {}
process.once('exit', () => { for (const c of children) c.killNow() })
const shutdown = onShutdown({ info: (_o, m) => say(m), error: (o, m) => say(`${m}: ${String((o as { err?: unknown }).err)}`) }, stopAll, 2 * SUPERVISOR_KILL_AFTER_MS + 10_000)
let stopping = false
// Run by npm, the supervisor's parent is npm's `sh -c`, which passes no signal on:
// a SIGTERM to npm alone (a process manager stopping `npm start`) killed the shell
// and left the whole fleet running. So once that parent is gone, the fleet stops
// as it does on SIGTERM (unless it is already stopping: a second signal would cut
// the drain short).
if (process.env.npm_lifecycle_event) {
  const parent = process.ppid
  const watch = setInterval(() => {
    if (process.ppid === parent) return
    clearInterval(watch)
    if (!stopping) shutdown.close()
  }, 500)
  watch.unref()
}

/** `gateway`, or one of the others GATEWAY_REPLICAS adds (`gateway-2`…). */
function isGateway (name: string): boolean { return /^gateway(-\d+)?$/.test(name) }

async function stopAll (): Promise<void> {
  stopping = true
  say('draining the gateway, then the lanes, then PostgreSQL')
  await Promise.all(children.filter(c => isGateway(c.spec.name)).map(c => c.stop()))
  await Promise.all(children.filter(c => !isGateway(c.spec.name)).map(c => c.stop()))
  await owned.stopBackendPriorities?.()
  await owned.stopDatabase?.()
  say('stopped')
}

/** Start-up cannot go on: say why in one line and stop what was started. */
async function fail (message: string): Promise<never> {
  say(message)
  await stopAll()
  process.exit(1)
}

// Several gateways must share the retry guard's counters, or a client spread
// over N of them gets N times ADV-IR-01's limit (gateway/guard-store.ts).
if (cfg.GATEWAY_REPLICAS > 1 && cfg.REDIS_URL === '') {
  say(`ERR_CONFIG_INVALID: GATEWAY_REPLICAS=${cfg.GATEWAY_REPLICAS} needs REDIS_URL: each gateway would count the retry limits alone and a client spread over them would get ${cfg.GATEWAY_REPLICAS} times the limit; set REDIS_URL=redis://host:port (a redis-server of yours), or run one gateway`)
  process.exit(1)
}
/** The gateways: `gateway`, then `gateway-2`… on the ports after GATEWAY_PORT. */
const gateways = Array.from({ length: cfg.GATEWAY_REPLICAS }, (_, i) => ({ name: i === 0 ? 'gateway' : `gateway-${i + 1}`, port: cfg.GATEWAY_PORT + i }))

const laneUrl = Object.fromEntries(LANE_NAMES.map(n => [n, laneUrlOf(laneLimits(n))]))
const conflicts = await portConflicts([
  ...(cfg.DATABASE_URL ? [] : [{ name: 'embedded PostgreSQL', host: '127.0.0.1', port: cfg.PG_PORT }]),
  { name: 'tax-sandbox', host: '127.0.0.1', port: cfg.TAX_SANDBOX_PORT },
  ...LANE_NAMES.map(n => ({ name: n, host: laneLimits(n).host, port: laneLimits(n).port })),
  ...workerLanes.map((lane, i) => ({ name: `worker-${lane}`, host: '127.0.0.1', port: cfg.WORKER_PORT + i })),
  ...gateways.map(g => ({ name: g.name, host: '127.0.0.1', port: g.port })),
  { name: 'deck', host: '127.0.0.1', port: cfg.DECK_PORT },
])
if (conflicts.length > 0) await fail(describeConflicts(conflicts))

// Run compiled (npm start, start.mjs), the supervisor is part of the tree it was
// compiled into and starts that fleet; run from source (the tests and benches),
// it compiles the fleet to FLEET_DIST unless FLEET_PREBUILT.
const compiledSelf = path.extname(import.meta.filename) === '.js'
let entry = compiledSelf ? path.resolve(import.meta.dirname, '../main.js') : fleetEntry(cfg.FLEET_DIST)
if (!compiledSelf && !cfg.FLEET_PREBUILT) {
  say(`compiling the fleet to ${cfg.FLEET_DIST}/`)
  entry = await buildFleet(cfg.FLEET_DIST).catch(err => fail((err as Error).message))
}

const secrets = localSecrets(dataDir)
const db = await bootstrapDatabase({ dataDir, port: cfg.PG_PORT, database: cfg.PG_DATABASE, secrets, databaseUrl: cfg.DATABASE_URL, log: say, compiledDaemon: path.join(path.dirname(entry), '../shared/db/embedded-daemon.js') }).catch((err: unknown) => {
  // An embedded server that cannot start says why in one line; no stack trace.
  if (!isEmbeddedStartError(err)) return fail(`the database did not come up: ${(err as Error).message}`)
  process.stderr.write(`[supervisor] ${err.message}\n`)
  process.exit(err.exitCode)
})
if (db.embedded) owned.stopDatabase = () => db.embedded!.stop()
// Lane-owned tools run as the fleet's own compiled commands: the supervisor imports no lane code.
const run = promisify(execFile)
const tool = (name: string, args: string[], env: Record<string, string> = {}) =>
  run(process.execPath, [entry, name, ...args], { cwd: ROOT, env: { ...process.env, ...env } })
const demoCards = JSON.parse((await tool('seed-cards', ['demo'], { DATABASE_URL: db.superUrl })).stdout) as Array<{ token: string, currency: string, available: number, status: string }>

// The local API key: kept in credentials.json (0600) and reused while it is live.
const keysFile = path.join(dataDir, 'api-keys.json')
const credsFile = path.join(dataDir, 'credentials.json')
let apiKey: string | undefined
try { apiKey = (JSON.parse(fs.readFileSync(credsFile, 'utf8')) as { apiKey?: string }).apiKey } catch { /* first run */ }
const live = new Set(readKeyFile(keysFile).keys.filter(k => !k.revokedAt).map(k => k.hash))
if (!apiKey || !live.has(hashKey(apiKey))) apiKey = createKey(keysFile, 'local-demo')

const sandboxUrl = `http://127.0.0.1:${cfg.TAX_SANDBOX_PORT}`
const gatewayUrl = `http://127.0.0.1:${cfg.GATEWAY_PORT}`
const deckUrl = `http://127.0.0.1:${cfg.DECK_PORT}`
const certFile = path.join(dataDir, 'tax-certificate.json')
// CPU is a shared resource too when the fleet shares cores: nice levels from the fleet table.
const niceOf = (name: string): number => cfg.CPU_PRIORITIES ? NICE[fleetProcess(name).priority] : 0
const liveUrl = (name: string, url: string): string => url + fleetProcess(name).health.live
// "fleet is up" waits for each process to be ready where it has a readiness
// route: a lane is ready only once warm, so the first requests find it so.
const readyUrl = (name: string, url: string): string => url + (fleetProcess(name).health.ready ?? fleetProcess(name).health.live)
const specs: Array<Omit<ChildSpec, 'argv'> & { process: string }> = [
  // The sandbox stands in for a remote third party: it must not compete with the fleet for the local CPU.
  { name: 'tax-sandbox', process: 'tax-sandbox', env: { TAX_SANDBOX_PORT: String(cfg.TAX_SANDBOX_PORT) }, healthUrl: liveUrl('tax-sandbox', sandboxUrl), nice: niceOf('tax-sandbox') },
  ...LANE_NAMES.map(n => {
    const l = laneLimits(n)
    return { name: n, process: n, env: { DATABASE_URL: db.roleUrl(l.db.role), TAX_PROVIDER_URL: sandboxUrl, TAX_CERTIFICATE_FILE: certFile, [`${envPrefix(n)}PORT`]: String(l.port) }, healthUrl: readyUrl(n, laneUrl[n]!), nice: niceOf(n) }
  }),
  // One worker process per lane that owns queues, so async work is isolated per lane too.
  ...workerLanes.map((lane, i) => ({
    name: `worker-${lane}`, process: 'worker',
    env: { DATABASE_URL: db.roleUrl(jobsRoleName()), [`${envPrefix(lane)}DATABASE_URL`]: db.roleUrl(laneLimits(lane).db.role), TAX_PROVIDER_URL: sandboxUrl, WORKER_QUEUES: LANE_QUEUES[lane].join(','), WORKER_PORT: String(cfg.WORKER_PORT + i), WORKER_REPLICAS: String(workerLanes.length) },
    healthUrl: readyUrl(`worker-${lane}`, `http://127.0.0.1:${cfg.WORKER_PORT + i}`),
    nice: niceOf(`worker-${lane}`),
  })),
  ...gateways.map(g => ({
    name: g.name, process: 'gateway',
    env: {
      GATEWAY_PORT: String(g.port), API_KEYS_FILE: keysFile, CARD_AUTH_URL: laneUrl['card-auth']!, FRAUD_URL: laneUrl.fraud!, TAX_URL: laneUrl.tax!,
      ...(cfg.REDIS_URL === '' ? {} : { REDIS_URL: cfg.REDIS_URL, GATEWAY_REPLICAS: String(cfg.GATEWAY_REPLICAS) }),
    },
    healthUrl: readyUrl('gateway', `http://127.0.0.1:${g.port}`),
    nice: niceOf('gateway'),
  })),
  // The admin plane: loopback only, its own DB role, polling every process above.
  {
    name: 'deck', process: 'deck',
    env: {
      DECK_PORT: String(cfg.DECK_PORT), DECK_HOST: '127.0.0.1', ADMIN_TOKEN: secrets.adminToken, DATABASE_URL: db.roleUrl(deckRoleName()),
      CARD_AUTH_URL: laneUrl['card-auth']!, FRAUD_URL: laneUrl.fraud!, TAX_URL: laneUrl.tax!, GATEWAY_URL: gatewayUrl, TAX_SANDBOX_URL: sandboxUrl,
      WORKER_URLS: workerLanes.map((lane, i) => `worker-${lane}=http://127.0.0.1:${cfg.WORKER_PORT + i}`).join(','),
    },
    healthUrl: readyUrl('deck', deckUrl),
    nice: niceOf('deck'),
  },
]
// --expose-gc: each child's idle trim (shared/idle-trim.ts).
for (const { process: name, ...s } of specs) children.push(new SupervisedChild({ ...s, argv: ['--expose-gc', ...nodeArgs(isGateway(s.name) ? 'gateway' : s.name), entry, name], env: { ...s.env, ...(cfg.QUIET ? { LOG_LEVEL: 'error' } : {}) } }, say))

try {
  // The sandbox first: the tax compensation table is certified against it before the lanes start.
  const sandbox = children[0]
  sandbox!.start()
  await waitHealthy(sandbox!.spec.healthUrl, 60_000)
} catch (err) {
  await fail(`fleet did not come up: ${(err as Error).message}`)
}
// An uncertified compensation table blocks the start (ADV-UC-01), as a failing
// certification job blocks a deployment in Compose and Kubernetes.
const cert = await tool('tax-certify', ['--provider', sandboxUrl, '--out', certFile]).then(r => ({ ok: true, out: r.stdout }), (err: { stdout?: string, message: string }) => ({ ok: false, out: err.stdout || err.message }))
say(cert.out.trim().split('\n')[0] ?? '')
if (!cert.ok) await fail(`ERR_UNTESTED_COMPENSATION_REJECTED: the tax compensation table did not pass certification, so the fleet does not start:\n${cert.out.trim()}`)
try {
  const rest = children.slice(1)
  for (const c of rest) c.start()
  await Promise.all(rest.map(c => waitHealthy(c.spec.healthUrl, 60_000)))
} catch (err) {
  await fail(`fleet did not come up: ${(err as Error).message}`)
}

// The database's work at its lanes' priorities too: each role's backends at its
// lane's nice (backend-priorities.ts), on a server started here only. The
// workers' shared role at the better of their lanes' levels.
if (db.embedded && cfg.CPU_PRIORITIES) {
  const niceByRole: Record<string, number> = Object.fromEntries(LANE_NAMES.map(n => [laneLimits(n).db.role, NICE[LANE_DEFAULTS[n].priority]]))
  niceByRole[jobsRoleName()] = Math.min(...workerLanes.map(l => NICE[LANE_DEFAULTS[l].priority]))
  niceByRole[deckRoleName()] = NICE.admin
  owned.stopBackendPriorities = startBackendPriorities({ databaseUrl: db.superUrl, niceByRole, everyMs: 2_000, log: say }).stop
}

const gatewayUrls = gateways.map(g => `http://127.0.0.1:${g.port}`)
const creds = {
  gatewayUrl,
  gatewayUrls,
  deckUrl,
  apiKey,
  adminToken: secrets.adminToken,
  databaseUrl: db.superUrl,
  demoCards: demoCards.filter(c => c.status === 'active').map(c => ({ token: c.token, currency: c.currency, available: c.available })),
}
fs.writeFileSync(credsFile, JSON.stringify(creds, null, 2), { mode: 0o600 })
fs.chmodSync(credsFile, 0o600)
const card = creds.demoCards[0]!
say(`fleet is up (pids: ${children.map(c => `${c.spec.name}=${c.pid}`).join(' ')})
  gateway      ${gatewayUrls.join(' ')}${gatewayUrls.length > 1 ? `   (sharing retry limits in ${cfg.REDIS_URL})` : ''}
  deck         ${creds.deckUrl}   (admin token: ${secrets.adminToken})
  API key      ${apiKey}
  demo cards   ${creds.demoCards.slice(0, 2).map(c => c.token).join(', ')}
  credentials  ${credsFile}
  try:
    curl -s -X POST ${gatewayUrl}/v1/authorizations \\
      -H "Authorization: Bearer ${apiKey}" -H "Idempotency-Key: demo-$(date +%s)" \\
      -H "Content-Type: application/json" \\
      -d '{"merchantId":"m_demo","cardToken":"${card.token}","amount":{"value":1250,"currency":"${card.currency}"}}'
  Ctrl-C stops everything.`)
