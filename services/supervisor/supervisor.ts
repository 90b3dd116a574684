// The fleet on one machine, as an object: `start` compiles the fleet, brings up
// embedded PostgreSQL (unless DATABASE_URL), migrations and lane roles, demo data
// and a local API key, has the tax table certified (or no start), then starts
// every process as its own child, restarted with backoff if it dies; `stop`
// drains the gateway first, then the lanes, then PostgreSQL. Everything it
// holds is per supervisor and it never exits the process, so a test can run one
// in-process; signals, the exit code and the 'exit' hook are main.ts's.
import fs from 'node:fs'
import path from 'node:path'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { fleetProcess, NICE } from '../../shared/fleet.ts'
import { bootstrapDatabase, localSecrets, type Bootstrapped, type LocalSecrets } from '../../shared/db/bootstrap.ts'
import { isEmbeddedStartError } from '../../shared/db/embedded.ts'
import { deckRoleName, jobsRoleName, LANE_DEFAULTS, LANE_NAMES, LANE_QUEUES, envPrefix, laneLimits, laneUrl as laneUrlOf, type LaneName } from '../../shared/lanes.ts'
import { createKey, hashKey, readKeyFile } from '../../shared/api-keys.ts'
import { startBackendPriorities } from './backend-priorities.ts'
import { buildFleet, fleetEntry, ROOT } from './build.ts'
import { nodeArgsVar, WORKER_LANES as workerLanes, type SupervisorConfig } from './config.ts'
import { SupervisedChild, waitHealthy, type ChildSpec } from './child.ts'
import { describeConflicts, portConflicts, type PortUse } from './ports.ts'

export interface Credentials {
  gatewayUrl: string
  gatewayUrls: string[]
  deckUrl: string
  apiKey: string
  adminToken: string
  databaseUrl: string
  demoCards: Array<{ token: string, currency: string, available: number }>
}

/** What `start` resolves to once the fleet is up: what it printed and wrote to credentials.json. */
export interface FleetUp {
  credentials: Credentials
  credentialsFile: string
  /** Each child's pid by name, in start order. */
  pids: Record<string, number | undefined>
}

export interface Supervisor {
  /** Resolves once every child is ready; rejects with StartFailed when the start cannot go on. */
  start (): Promise<FleetUp>
  /** Drains and stops what was started; once, however often it is called. */
  stop (): Promise<void>
  /** Whether `stop` has begun. */
  readonly stopping: boolean
  /** SIGKILL to every child, no waiting: for the process's last moment. */
  killNow (): void
}

export interface SupervisorOutput {
  /** One of the supervisor's lines; default: stdout, prefixed `[supervisor] `. */
  say? (line: string): void
  /** The embedded server's refusal to start; default: stderr, prefixed alike. */
  sayError? (line: string): void
}

/** A start that cannot go on: already said, and what it had started already stopped. */
export class StartFailed extends Error {
  readonly exitCode: number
  constructor (message: string, exitCode: number) {
    super(message)
    this.name = 'StartFailed'
    this.exitCode = exitCode
  }
}

interface State {
  cfg: SupervisorConfig
  dataDir: string
  say (line: string): void
  sayError (line: string): void
  // What has been started, for every way it can end (stop, killNow).
  children: SupervisedChild[]
  stopDatabase?: () => Promise<void>
  stopBackendPriorities?: () => Promise<void>
  stopped?: Promise<void>
}

type Tool = (name: string, args: string[], env?: Record<string, string>) => Promise<{ stdout: string }>

/** What the children are started with, decided before the first of them. */
interface Plan {
  cfg: SupervisorConfig
  entry: string
  db: Bootstrapped
  secrets: LocalSecrets
  keysFile: string
  certFile: string
  gateways: Gateway[]
  laneUrl: Record<string, string>
  sandboxUrl: string
  gatewayUrl: string
  deckUrl: string
}

interface Gateway { name: string, port: number }
interface DemoCard { token: string, currency: string, available: number, status: string }
type Spec = Omit<ChildSpec, 'argv'> & { process: string }

const writeLine = (stream: NodeJS.WritableStream) => (m: string): void => { stream.write(`[supervisor] ${m}\n`) }

export function createSupervisor (cfg: SupervisorConfig, out: SupervisorOutput = {}): Supervisor {
  const s: State = {
    cfg,
    dataDir: path.resolve(cfg.DATA_DIR),
    say: out.say ?? writeLine(process.stdout),
    sayError: out.sayError ?? writeLine(process.stderr),
    children: [],
  }
  return {
    start: () => start(s),
    stop: () => stop(s),
    get stopping () { return s.stopped !== undefined },
    killNow: () => { for (const c of s.children) c.killNow() },
  }
}

/** `gateway`, or one of the others GATEWAY_REPLICAS adds (`gateway-2`…). */
function isGateway (name: string): boolean { return /^gateway(-\d+)?$/.test(name) }

// One drain, whoever asks: a failed start stops what it started, and a signal
// arriving meanwhile waits for that same drain instead of running a second.
function stop (s: State): Promise<void> {
  s.stopped ??= drain(s)
  return s.stopped
}

async function drain (s: State): Promise<void> {
  s.say('draining the gateway, then the lanes, then PostgreSQL')
  await Promise.all(s.children.filter(c => isGateway(c.spec.name)).map(c => c.stop()))
  await Promise.all(s.children.filter(c => !isGateway(c.spec.name)).map(c => c.stop()))
  await s.stopBackendPriorities?.()
  await s.stopDatabase?.()
  s.say('stopped')
}

/** Start-up cannot go on: say why in one line and stop what was started. */
async function fail (s: State, message: string): Promise<never> {
  s.say(message)
  await stop(s)
  throw new StartFailed(message, 1)
}

async function start (s: State): Promise<FleetUp> {
  const { cfg } = s
  refuseUnsharedReplicas(s)
  const gateways = gatewaysOf(cfg)
  const conflicts = await portConflicts(portUses(cfg, gateways))
  if (conflicts.length > 0) await fail(s, describeConflicts(conflicts))
  const entry = await compiledFleet(s)
  const secrets = localSecrets(s.dataDir)
  const db = await startDatabase(s, entry, secrets)
  const tool = fleetTool(entry)
  const demoCards = await seedDemoCards(tool, db)
  const keysFile = path.join(s.dataDir, 'api-keys.json')
  const credsFile = path.join(s.dataDir, 'credentials.json')
  const apiKey = localApiKey(keysFile, credsFile)
  const plan = planOf(s, { entry, db, secrets, keysFile, gateways })
  for (const spec of childSpecs(plan)) s.children.push(supervised(s, spec, entry))
  // The sandbox first: the tax compensation table is certified against it before the lanes start.
  await upOrFail(s, s.children.slice(0, 1))
  await certify(s, tool, plan)
  await upOrFail(s, s.children.slice(1))
  startDatabasePriorities(s, db)
  const credentials = credentialsOf(plan, apiKey, demoCards)
  writeCredentials(credsFile, credentials)
  s.say(upMessage(s, credentials, credsFile))
  const pids = Object.fromEntries(s.children.map(c => [c.spec.name, c.pid]))
  return { credentials, credentialsFile: credsFile, pids }
}

// Several gateways must share the retry guard's counters, or a client spread
// over N of them gets N times ADV-IR-01's limit (gateway/guard-store.ts).
function refuseUnsharedReplicas (s: State): void {
  const n = s.cfg.GATEWAY_REPLICAS
  if (n <= 1 || s.cfg.REDIS_URL !== '') return
  const message = `ERR_CONFIG_INVALID: GATEWAY_REPLICAS=${n} needs REDIS_URL: each gateway would count the retry limits alone and a client spread over them would get ${n} times the limit; set REDIS_URL=redis://host:port (a redis-server of yours), or run one gateway`
  s.say(message)
  throw new StartFailed(message, 1)
}

/** The gateways: `gateway`, then `gateway-2`… on the ports after GATEWAY_PORT. */
function gatewaysOf (cfg: SupervisorConfig): Gateway[] {
  return Array.from({ length: cfg.GATEWAY_REPLICAS }, (_, i) => ({ name: i === 0 ? 'gateway' : `gateway-${i + 1}`, port: cfg.GATEWAY_PORT + i }))
}

function portUses (cfg: SupervisorConfig, gateways: Gateway[]): PortUse[] {
  return [
    ...(cfg.DATABASE_URL ? [] : [{ name: 'embedded PostgreSQL', host: '127.0.0.1', port: cfg.PG_PORT }]),
    { name: 'tax-sandbox', host: '127.0.0.1', port: cfg.TAX_SANDBOX_PORT },
    ...LANE_NAMES.map(n => ({ name: n, host: laneLimits(n).host, port: laneLimits(n).port })),
    ...workerLanes.map((lane, i) => ({ name: `worker-${lane}`, host: '127.0.0.1', port: cfg.WORKER_PORT + i })),
    ...gateways.map(g => ({ name: g.name, host: '127.0.0.1', port: g.port })),
    { name: 'deck', host: '127.0.0.1', port: cfg.DECK_PORT },
  ]
}

// Run compiled (npm start, start.mjs), the supervisor is part of the tree it was
// compiled into and starts that fleet; run from source (the tests and benches),
// it compiles the fleet to FLEET_DIST unless FLEET_PREBUILT. Only main.ts
// imports this module, so compiled it lies in the supervisor's own main.js.
async function compiledFleet (s: State): Promise<string> {
  if (path.extname(import.meta.filename) === '.js') return path.resolve(import.meta.dirname, '../main.js')
  if (s.cfg.FLEET_PREBUILT) return fleetEntry(s.cfg.FLEET_DIST)
  s.say(`compiling the fleet to ${s.cfg.FLEET_DIST}/`)
  return await buildFleet(s.cfg.FLEET_DIST).catch(err => fail(s, (err as Error).message))
}

async function startDatabase (s: State, entry: string, secrets: LocalSecrets): Promise<Bootstrapped> {
  const compiledDaemon = path.join(path.dirname(entry), '../shared/db/embedded-daemon.js')
  const db = await bootstrapDatabase({
    dataDir: s.dataDir,
    port: s.cfg.PG_PORT,
    database: s.cfg.PG_DATABASE,
    secrets,
    databaseUrl: s.cfg.DATABASE_URL,
    log: s.say,
    compiledDaemon,
  }).catch((err: unknown) => {
    // An embedded server that cannot start says why in one line; no stack trace.
    if (!isEmbeddedStartError(err)) return fail(s, `the database did not come up: ${(err as Error).message}`)
    s.sayError(err.message)
    throw new StartFailed(err.message, err.exitCode)
  })
  if (db.embedded) s.stopDatabase = () => db.embedded!.stop()
  return db
}

/** Lane-owned tools run as the fleet's own compiled commands: the supervisor imports no lane code. */
function fleetTool (entry: string): Tool {
  const run = promisify(execFile)
  return (name, args, env = {}) =>
    run(process.execPath, [entry, name, ...args], { cwd: ROOT, env: { ...process.env, ...env } })
}

async function seedDemoCards (tool: Tool, db: Bootstrapped): Promise<DemoCard[]> {
  return JSON.parse((await tool('seed-cards', ['demo'], { DATABASE_URL: db.superUrl })).stdout) as DemoCard[]
}

/** The local API key: kept in credentials.json (0600) and reused while it is live. */
function localApiKey (keysFile: string, credsFile: string): string {
  let apiKey: string | undefined
  try { apiKey = (JSON.parse(fs.readFileSync(credsFile, 'utf8')) as { apiKey?: string }).apiKey } catch { /* first run */ }
  const live = new Set(readKeyFile(keysFile).keys.filter(k => !k.revokedAt).map(k => k.hash))
  if (!apiKey || !live.has(hashKey(apiKey))) apiKey = createKey(keysFile, 'local-demo')
  return apiKey
}

function planOf (s: State, p: Pick<Plan, 'entry' | 'db' | 'secrets' | 'keysFile' | 'gateways'>): Plan {
  return {
    ...p,
    cfg: s.cfg,
    certFile: path.join(s.dataDir, 'tax-certificate.json'),
    laneUrl: Object.fromEntries(LANE_NAMES.map(n => [n, laneUrlOf(laneLimits(n))])),
    sandboxUrl: `http://127.0.0.1:${s.cfg.TAX_SANDBOX_PORT}`,
    gatewayUrl: `http://127.0.0.1:${s.cfg.GATEWAY_PORT}`,
    deckUrl: `http://127.0.0.1:${s.cfg.DECK_PORT}`,
  }
}

// CPU is a shared resource too when the fleet shares cores: nice levels from the fleet table.
const niceOf = (cfg: SupervisorConfig, name: string): number =>
  cfg.CPU_PRIORITIES ? NICE[fleetProcess(name).priority] : 0
const liveUrl = (name: string, url: string): string => url + fleetProcess(name).health.live
// "fleet is up" waits for each process to be ready where it has a readiness
// route: a lane is ready only once warm, so the first requests find it so.
const readyUrl = (name: string, url: string): string => {
  const { health } = fleetProcess(name)
  return url + (health.ready ?? health.live)
}

/** Every child, in start order. */
function childSpecs (p: Plan): Spec[] {
  return [
    // The sandbox stands in for a remote third party: it must not compete with the fleet for the local CPU.
    { name: 'tax-sandbox', process: 'tax-sandbox', env: { TAX_SANDBOX_PORT: String(p.cfg.TAX_SANDBOX_PORT) }, healthUrl: liveUrl('tax-sandbox', p.sandboxUrl), nice: niceOf(p.cfg, 'tax-sandbox') },
    ...LANE_NAMES.map(n => laneSpec(p, n)),
    // One worker process per lane that owns queues, so async work is isolated per lane too.
    ...workerLanes.map((lane, i) => workerSpec(p, lane, i)),
    ...p.gateways.map(g => gatewaySpec(p, g)),
    deckSpec(p),
  ]
}

function laneSpec (p: Plan, n: LaneName): Spec {
  const l = laneLimits(n)
  return { name: n, process: n, env: { DATABASE_URL: p.db.roleUrl(l.db.role), TAX_PROVIDER_URL: p.sandboxUrl, TAX_CERTIFICATE_FILE: p.certFile, [`${envPrefix(n)}PORT`]: String(l.port) }, healthUrl: readyUrl(n, p.laneUrl[n]!), nice: niceOf(p.cfg, n) }
}

function workerSpec (p: Plan, lane: LaneName, i: number): Spec {
  return {
    name: `worker-${lane}`,
    process: 'worker',
    env: { DATABASE_URL: p.db.roleUrl(jobsRoleName()), [`${envPrefix(lane)}DATABASE_URL`]: p.db.roleUrl(laneLimits(lane).db.role), TAX_PROVIDER_URL: p.sandboxUrl, WORKER_QUEUES: LANE_QUEUES[lane].join(','), WORKER_PORT: String(p.cfg.WORKER_PORT + i), WORKER_REPLICAS: String(workerLanes.length) },
    healthUrl: readyUrl(`worker-${lane}`, `http://127.0.0.1:${p.cfg.WORKER_PORT + i}`),
    nice: niceOf(p.cfg, `worker-${lane}`),
  }
}

function gatewaySpec (p: Plan, g: Gateway): Spec {
  return {
    name: g.name,
    process: 'gateway',
    env: {
      GATEWAY_PORT: String(g.port),
      API_KEYS_FILE: p.keysFile,
      CARD_AUTH_URL: p.laneUrl['card-auth']!,
      FRAUD_URL: p.laneUrl.fraud!,
      TAX_URL: p.laneUrl.tax!,
      ...(p.cfg.REDIS_URL === '' ? {} : { REDIS_URL: p.cfg.REDIS_URL, GATEWAY_REPLICAS: String(p.cfg.GATEWAY_REPLICAS) }),
    },
    healthUrl: readyUrl('gateway', `http://127.0.0.1:${g.port}`),
    nice: niceOf(p.cfg, 'gateway'),
  }
}

/** The admin plane: loopback only, its own DB role, polling every process above. */
function deckSpec (p: Plan): Spec {
  return {
    name: 'deck',
    process: 'deck',
    env: {
      DECK_PORT: String(p.cfg.DECK_PORT),
      DECK_HOST: '127.0.0.1',
      ADMIN_TOKEN: p.secrets.adminToken,
      DATABASE_URL: p.db.roleUrl(deckRoleName()),
      CARD_AUTH_URL: p.laneUrl['card-auth']!,
      FRAUD_URL: p.laneUrl.fraud!,
      TAX_URL: p.laneUrl.tax!,
      GATEWAY_URL: p.gatewayUrl,
      TAX_SANDBOX_URL: p.sandboxUrl,
      WORKER_URLS: workerLanes.map((lane, i) => `worker-${lane}=http://127.0.0.1:${p.cfg.WORKER_PORT + i}`).join(','),
    },
    healthUrl: readyUrl('deck', p.deckUrl),
    nice: niceOf(p.cfg, 'deck'),
  }
}

/** FLEET_NODE_ARGS, then the child's own FLEET_NODE_ARGS_<CHILD>. */
function nodeArgs (cfg: SupervisorConfig, child: string): string[] {
  return [cfg.FLEET_NODE_ARGS, (cfg as Record<string, unknown>)[nodeArgsVar(child)] as string].flatMap(a => a.split(' ').filter(Boolean))
}

// --expose-gc: each child's idle trim (shared/idle-trim.ts).
function supervised (s: State, { process: name, ...spec }: Spec, entry: string): SupervisedChild {
  const argv = ['--expose-gc', ...nodeArgs(s.cfg, isGateway(spec.name) ? 'gateway' : spec.name), entry, name]
  return new SupervisedChild({ ...spec, argv, env: { ...spec.env, ...(s.cfg.QUIET ? { LOG_LEVEL: 'error' } : {}) } }, s.say)
}

/** Starts `children` and waits until each is ready; one that is not in 60 s stops the start. */
async function upOrFail (s: State, children: SupervisedChild[]): Promise<void> {
  try {
    for (const c of children) c.start()
    await Promise.all(children.map(c => waitHealthy(c.spec.healthUrl, 60_000)))
  } catch (err) {
    await fail(s, `fleet did not come up: ${(err as Error).message}`)
  }
}

// An uncertified compensation table blocks the start (ADV-UC-01), as a failing
// certification job blocks a deployment in Compose and Kubernetes.
async function certify (s: State, tool: Tool, p: Plan): Promise<void> {
  const cert = await tool('tax-certify', ['--provider', p.sandboxUrl, '--out', p.certFile]).then(r => ({ ok: true, out: r.stdout }), (err: { stdout?: string, message: string }) => ({ ok: false, out: err.stdout || err.message }))
  s.say(cert.out.trim().split('\n')[0] ?? '')
  if (!cert.ok) await fail(s, `ERR_UNTESTED_COMPENSATION_REJECTED: the tax compensation table did not pass certification, so the fleet does not start:\n${cert.out.trim()}`)
}

// The database's work at its lanes' priorities too: each role's backends at its
// lane's nice (backend-priorities.ts), on a server started here only. The
// workers' shared role at the better of their lanes' levels.
function startDatabasePriorities (s: State, db: Bootstrapped): void {
  if (!db.embedded || !s.cfg.CPU_PRIORITIES) return
  const niceByRole: Record<string, number> =
    Object.fromEntries(LANE_NAMES.map(n => [laneLimits(n).db.role, NICE[LANE_DEFAULTS[n].priority]]))
  niceByRole[jobsRoleName()] = Math.min(...workerLanes.map(l => NICE[LANE_DEFAULTS[l].priority]))
  niceByRole[deckRoleName()] = NICE.admin
  const priorities = startBackendPriorities({ databaseUrl: db.superUrl, niceByRole, everyMs: 2_000, log: s.say })
  s.stopBackendPriorities = priorities.stop
}

function credentialsOf (p: Plan, apiKey: string, demoCards: DemoCard[]): Credentials {
  return {
    gatewayUrl: p.gatewayUrl,
    gatewayUrls: p.gateways.map(g => `http://127.0.0.1:${g.port}`),
    deckUrl: p.deckUrl,
    apiKey,
    adminToken: p.secrets.adminToken,
    databaseUrl: p.db.superUrl,
    demoCards: demoCards.filter(c => c.status === 'active').map(c => ({ token: c.token, currency: c.currency, available: c.available })),
  }
}

function writeCredentials (file: string, creds: Credentials): void {
  fs.writeFileSync(file, JSON.stringify(creds, null, 2), { mode: 0o600 })
  fs.chmodSync(file, 0o600)
}

function upMessage (s: State, creds: Credentials, credsFile: string): string {
  const { gatewayUrl, gatewayUrls, apiKey, adminToken } = creds
  const card = creds.demoCards[0]!
  return `fleet is up (pids: ${s.children.map(c => `${c.spec.name}=${c.pid}`).join(' ')})
  gateway      ${gatewayUrls.join(' ')}${gatewayUrls.length > 1 ? `   (sharing retry limits in ${s.cfg.REDIS_URL})` : ''}
  deck         ${creds.deckUrl}   (admin token: ${adminToken})
  API key      ${apiKey}
  demo cards   ${creds.demoCards.slice(0, 2).map(c => c.token).join(', ')}
  credentials  ${credsFile}
  try:
    curl -s -X POST ${gatewayUrl}/v1/authorizations \\
      -H "Authorization: Bearer ${apiKey}" -H "Idempotency-Key: demo-$(date +%s)" \\
      -H "Content-Type: application/json" \\
      -d '{"merchantId":"m_demo","cardToken":"${card.token}","amount":{"value":1250,"currency":"${card.currency}"}}'
  Ctrl-C stops everything.`
}
