// The Compose stack as one set of steps, for `npm run compose:up` / `compose:down`
// and the Compose test: a Docker engine, a Compose that is installed, the base
// images (offline stand-ins where no registry answers), the fleet's two images
// built with the real Dockerfile, the stack up and healthy, and the local run's
// credentials written as `npm start` writes them.
import { execFile, spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { createKey, hashKey, readKeyFile } from '../../shared/api-keys.ts'
import { envPrefix, LANE_NAMES, type LaneName } from '../../shared/lanes.ts'
import type { Credentials as FleetCredentials } from '../../services/supervisor/supervisor.ts'

const run = promisify(execFile)
export const ROOT = path.resolve(import.meta.dirname, '../..')
export const COMPOSE_FILE = path.join(ROOT, 'deploy/compose/docker-compose.yml')
export const IMAGE = 'watertight:0.1.0'
export const DEMO_IMAGE = 'watertight-demo:0.1.0'

/** A step that cannot go on, with one line saying what to do. */
export class StackError extends Error {
  constructor (message: string, readonly exitCode = 1) { super(message); this.name = 'StackError' }
}

export interface StackOptions {
  /** Compose project name: containers, networks and volumes are named after it. */
  project: string
  /** Replicas per lane (default 1 each). */
  replicas?: Partial<Record<LaneName, number>>
  /** Gateway containers (default 1), on consecutive host ports from gatewayPort. */
  gateways?: number
  /** Host ports of the gateway and the deck (127.0.0.1 for the deck). */
  gatewayPort?: number
  deckPort?: number
  /** Compose files laid over the stack's own (a test's knobs). */
  overrides?: string[]
  log?: (line: string) => void
}

type Exec = { code: number, out: string, err: string }
async function exec (file: string, args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 0): Promise<Exec> {
  return run(file, args, { cwd: ROOT, env, maxBuffer: 64 * 1024 * 1024, timeout: timeoutMs }).then(
    r => ({ code: 0, out: r.stdout, err: r.stderr }),
    (e: { code?: number | string, stdout?: string, stderr?: string, message: string }) => ({ code: typeof e.code === 'number' ? e.code : 127, out: e.stdout ?? '', err: e.stderr || e.message })
  )
}

/** Runs a command with its output passed through (long builds show their progress). */
function stream (file: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return new Promise(resolve => {
    const p = spawn(file, args, { cwd: ROOT, env, stdio: ['ignore', 'inherit', 'inherit'] })
    p.once('error', () => resolve(127))
    p.once('exit', (code, signal) => resolve(signal ? 1 : (code ?? 1)))
  })
}

const engineUp = async (): Promise<boolean> => (await exec('docker', ['info', '--format', '{{.ServerVersion}}'], process.env, 10_000)).code === 0

/**
 * A Docker engine that answers. Where none does and this user can start one
 * (root, `dockerd` installed, no init system to ask), it is started in the
 * background with its log in `.data/dockerd.log`, and left running.
 */
export async function ensureEngine (log: (l: string) => void): Promise<void> {
  if (await engineUp()) return
  const dockerd = (await exec('sh', ['-c', 'command -v dockerd'])).out.trim()
  if (!dockerd) throw new StackError('no Docker engine answers and dockerd is not installed: run `bash .ci/system-deps` (installs docker.io), or start your engine')
  if (process.getuid?.() !== 0) throw new StackError('no Docker engine answers: start it (e.g. `sudo dockerd &` or your init system\'s docker service)')
  fs.mkdirSync(path.join(ROOT, '.data'), { recursive: true })
  const out = fs.openSync(path.join(ROOT, '.data/dockerd.log'), 'a')
  spawn(dockerd, [], { detached: true, stdio: ['ignore', out, out] }).unref()
  log('started dockerd (log: .data/dockerd.log)')
  for (let i = 0; i < 60; i++) {
    if (await engineUp()) return
    await sleep(500)
  }
  throw new StackError('dockerd did not answer within 30 s: see .data/dockerd.log')
}

/**
 * `docker compose` (the plugin) where it is installed, else `docker-compose`
 * (v1), else a line saying what to install.
 */
export async function composeCommand (): Promise<string[]> {
  if ((await exec('docker', ['compose', 'version'])).code === 0) return ['docker', 'compose']
  if ((await exec('docker-compose', ['version'])).code === 0) return ['docker-compose']
  throw new StackError('neither `docker compose` nor `docker-compose` is installed: run `bash .ci/system-deps` (installs docker-compose)')
}

const imageLabel = async (image: string, label: string): Promise<string | undefined> => {
  const r = await exec('docker', ['image', 'inspect', '--format', `{{ index .Config.Labels "${label}" }}`, image])
  return r.code === 0 ? r.out.trim() : undefined
}

/**
 * The base images the Dockerfile and the Compose file name. Kept when present;
 * otherwise deploy/standin/build-images.sh pulls them or, with no registry,
 * builds offline stand-ins under the same names.
 */
export async function ensureBaseImages (log: (l: string) => void): Promise<{ standin: boolean }> {
  const code = await stream('bash', [path.join(ROOT, 'deploy/standin/build-images.sh')])
  if (code !== 0) throw new StackError(`the base images could not be had (deploy/standin/build-images.sh exit ${code}): see its output above`)
  const standin = (await imageLabel('node:22-bookworm-slim', 'org.watertight.standin')) === '1'
  if (standin) log('base images: offline stand-ins (no registry); the image builds with --network none')
  return { standin }
}

/**
 * The fleet's production image and its demo target (the tax sandbox), with the
 * real Dockerfile. On a stand-in base the build needs no network: the stand-in
 * carries an npm cache of the lockfile.
 */
export async function buildImages (o: { standin: boolean }, log: (l: string) => void): Promise<void> {
  for (const [target, tag] of [[undefined, IMAGE], ['demo', DEMO_IMAGE]] as const) {
    const t0 = Date.now()
    log(`building ${tag} with deploy/Dockerfile…`)
    const args = ['build', '-q', '-f', 'deploy/Dockerfile', '-t', tag, ...(target ? ['--target', target] : []), ...(o.standin ? ['--network', 'none'] : []), '.']
    const r = await exec('docker', args, { ...process.env, DOCKER_BUILDKIT: '0' })
    if (r.code !== 0) throw new StackError(`docker build of ${tag} failed:\n${(r.out + r.err).trim().split('\n').slice(-30).join('\n')}`)
    log(`built ${tag} in ${((Date.now() - t0) / 1000).toFixed(0)} s`)
  }
}

const ENV_FILE = path.join(ROOT, 'deploy/compose/.env')
const SECRET_VARS = ['PG_SUPERUSER_PASSWORD', 'PG_ROLE_PASSWORD_CARD_AUTH_DS', 'PG_ROLE_PASSWORD_FRAUD_DS', 'PG_ROLE_PASSWORD_TAX_DS', 'PG_ROLE_PASSWORD_JOBS_DS', 'PG_ROLE_PASSWORD_DECK_DS', 'ADMIN_TOKEN'] as const

/**
 * deploy/compose/.env (read by Compose itself, so a hand-run `docker compose`
 * gets the same values): random passwords and admin token, made once (0600)
 * instead of the file's development defaults. Values already there are kept.
 */
export function ensureSecrets (): Record<string, string> {
  const have: Record<string, string> = {}
  if (fs.existsSync(ENV_FILE)) {
    for (const line of fs.readFileSync(ENV_FILE, 'utf8').split('\n')) {
      const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim())
      if (m) have[m[1]!] = m[2]!
    }
  }
  const missing = SECRET_VARS.filter(v => !have[v])
  if (missing.length > 0) {
    for (const v of missing) have[v] = crypto.randomBytes(24).toString('base64url')
    const text = Object.entries(have).map(([k, v]) => `${k}=${v}`).join('\n') + '\n'
    fs.writeFileSync(ENV_FILE, text, { mode: 0o600 })
  }
  return have
}

export interface Stack {
  compose: string[]
  env: NodeJS.ProcessEnv
  /** `compose` with the project and file, then `args`. */
  args (...args: string[]): string[]
}

export function stackOf (compose: string[], o: StackOptions): Stack {
  // <LANE>_REPLICAS is not passed on: each replica's share follows the ones that run.
  const env: NodeJS.ProcessEnv = { ...process.env, COMPOSE_PROJECT_NAME: o.project }
  for (const lane of LANE_NAMES) delete env[`${envPrefix(lane)}REPLICAS`]
  // One host port per gateway: a range Docker gives out one port of to each container.
  const gateways = o.gateways ?? 1
  const first = o.gatewayPort ?? 8080
  env.GATEWAY_PUBLISHED_PORTS = gateways > 1 ? `${first}-${first + gateways - 1}` : String(first)
  env.GATEWAY_REPLICAS = String(gateways)
  if (o.deckPort) env.DECK_PUBLISHED_PORT = String(o.deckPort)
  const files = [COMPOSE_FILE, ...(o.overrides ?? [])].flatMap(f => ['-f', f])
  return { compose, env, args: (...args) => [...compose.slice(1), '-p', o.project, ...files, ...args] }
}

export const composeExec = (s: Stack, args: string[], timeoutMs = 0): Promise<Exec> =>
  exec(s.compose[0]!, s.args(...args), s.env, timeoutMs)

interface ContainerState {
  id: string, service: string, status: string, exitCode: number, health?: string, restarts: number
}

export async function containers (s: Stack): Promise<ContainerState[]> {
  const project = s.env.COMPOSE_PROJECT_NAME!
  const ids = (await exec('docker', ['ps', '-aq', '--filter', `label=com.docker.compose.project=${project}`])).out.split('\n').filter(Boolean)
  if (ids.length === 0) return []
  // The whole JSON: a template naming .State.Health fails on a container without a health check.
  const r = await exec('docker', ['inspect', ...ids])
  const all = JSON.parse(r.out || '[]') as Array<{ Id: string, RestartCount: number, Config: { Labels: Record<string, string> }, State: { Status: string, ExitCode: number, Health?: { Status: string } } }>
  return all.map(c => ({
    id: c.Id,
    service: c.Config.Labels['com.docker.compose.service'] ?? '',
    status: c.State.Status,
    exitCode: c.State.ExitCode,
    ...(c.State.Health ? { health: c.State.Health.Status } : {}),
    restarts: c.RestartCount,
  }))
}

const ONE_SHOTS = new Set(['migrate', 'tax-certify'])
const settled = (c: ContainerState): boolean => ONE_SHOTS.has(c.service) ? c.status === 'exited' && c.exitCode === 0 : c.status === 'running' && (c.health === undefined || c.health === 'healthy')
const broken = (c: ContainerState): boolean => (ONE_SHOTS.has(c.service) && c.status === 'exited' && c.exitCode !== 0) || c.restarts >= 3

/**
 * Waits until every container of the stack is healthy (or, for the one-shots,
 * exited 0); a broken one fails at once with its last log lines.
 */
export async function waitHealthy (s: Stack, expected: number, timeoutMs = 240_000): Promise<ContainerState[]> {
  const until = Date.now() + timeoutMs
  for (;;) {
    const cs = await containers(s)
    const bad = cs.find(broken)
    if (bad) throw new StackError(`${bad.service} failed (${bad.status}, exit ${bad.exitCode}, ${bad.restarts} restarts):\n${await lastLogs(bad.id)}`)
    if (cs.length >= expected && cs.every(settled)) return cs
    if (Date.now() > until) {
      const waiting = cs.filter(c => !settled(c))
      throw new StackError(`not healthy within ${timeoutMs / 1000} s: ${waiting.map(c => `${c.service} (${c.health ?? c.status})`).join(', ') || `${cs.length} of ${expected} containers`}\n${waiting[0] ? await lastLogs(waiting[0].id) : ''}`)
    }
    await sleep(1_000)
  }
}

const lastLogs = async (id: string): Promise<string> => {
  const r = await exec('docker', ['logs', '--tail', '15', id])
  return (r.out + r.err).trim()
}

/** How many containers a stack of these replicas runs: every service but the profiled ones, a lane at its replicas. */
export function expectedContainers (o: StackOptions): number {
  const others = ['postgres', 'migrate', 'tax-sandbox', 'tax-certify', 'worker-fraud', 'worker-tax', 'redis', 'deck']
  return others.length + (o.gateways ?? 1) + LANE_NAMES.reduce((n, l) => n + (o.replicas?.[l] ?? 1), 0)
}

export async function up (s: Stack, o: StackOptions): Promise<void> {
  const scale = [...LANE_NAMES.flatMap(l => ['--scale', `${l}=${o.replicas?.[l] ?? 1}`]), '--scale', `gateway=${o.gateways ?? 1}`]
  const r = await composeExec(s, ['up', '-d', '--no-build', '--remove-orphans', ...scale])
  if (r.code !== 0) throw new StackError(`compose up failed:\n${(r.out + r.err).trim().split('\n').slice(-20).join('\n')}`)
}

export async function down (s: Stack, o: { volumes: boolean }): Promise<void> {
  const r = await composeExec(s, ['down', '--remove-orphans', '--timeout', '15', ...(o.volumes ? ['--volumes'] : [])])
  if (r.code !== 0) throw new StackError(`compose down failed:\n${(r.out + r.err).trim()}`)
}

/** What npm start writes to credentials.json, but the database URL: the stack's PostgreSQL is not published. */
export type Credentials = Omit<FleetCredentials, 'databaseUrl'>

export const KEYS_FILE = path.join(ROOT, 'deploy/compose/keys/api-keys.json')

/**
 * An API key for the client `compose-demo`: the one in `credsFile` while it is
 * live in the stack's key file, else a new one. Made before the stack starts,
 * so the gateway reads it at start rather than at its next check.
 */
export function demoApiKey (credsFile: string): string {
  let previous: string | undefined
  try { previous = (JSON.parse(fs.readFileSync(credsFile, 'utf8')) as { apiKey?: string }).apiKey } catch { /* first run */ }
  const live = new Set(readKeyFile(KEYS_FILE).keys.filter(k => !k.revokedAt).map(k => k.hash))
  return previous && live.has(hashKey(previous)) ? previous : createKey(KEYS_FILE, 'compose-demo')
}

/**
 * What `npm start` writes to `.data/credentials.json`, so the same tools drive
 * either fleet: the URLs, the key, the admin token and the demo cards (seeded
 * with the fleet's own `seed-cards demo`, run as the migrate service, the only
 * one with the superuser's URL). The stack's database is on an internal
 * network, so there is no `databaseUrl`.
 */
export async function writeCredentials (
  s: Stack, o: StackOptions, c: { apiKey: string, adminToken: string }, credsFile: string
): Promise<Credentials> {
  const seeded = await composeExec(s, ['run', '--rm', '-T', '--no-deps', 'migrate', 'seed-cards', 'demo'])
  if (seeded.code !== 0) throw new StackError(`seeding the demo cards failed:\n${(seeded.out + seeded.err).trim()}`)
  const cards = JSON.parse(seeded.out.trim().split('\n').at(-1)!) as Array<{ token: string, currency: string, available: number, status: string }>
  const creds: Credentials = {
    gatewayUrl: `http://127.0.0.1:${o.gatewayPort ?? 8080}`,
    gatewayUrls: Array.from({ length: o.gateways ?? 1 }, (_, i) => `http://127.0.0.1:${(o.gatewayPort ?? 8080) + i}`),
    deckUrl: `http://127.0.0.1:${o.deckPort ?? 9090}`,
    apiKey: c.apiKey,
    adminToken: c.adminToken,
    demoCards: cards.filter(x => x.status === 'active').map(x => ({ token: x.token, currency: x.currency, available: x.available })),
  }
  fs.mkdirSync(path.dirname(credsFile), { recursive: true })
  fs.writeFileSync(credsFile, JSON.stringify(creds, null, 2), { mode: 0o600 })
  fs.chmodSync(credsFile, 0o600)
  return creds
}
