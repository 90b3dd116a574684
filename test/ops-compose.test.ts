// deploy/compose, checked by a real compose parser (`docker compose config`, or
// Debian's docker-compose, which needs no engine for `config`): every process its
// own service with a health check and its own limits, lanes and PostgreSQL on
// internal networks, and lanes that scale with `--scale` alone (no replica count to keep in step).
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { parse } from 'yaml'
import { FLEET } from '../shared/fleet.ts'
import { envPrefix, LANE_DEFAULTS, laneLimits, LANE_NAMES } from '../shared/lanes.ts'
import { ROOT } from './helpers/procs.ts'

const run = promisify(execFile)
const FILE = 'deploy/compose/docker-compose.yml'

async function composeConfig (env: Record<string, string> = {}): Promise<any> {
  const opts = { cwd: ROOT, env: { ...process.env, ...env }, maxBuffer: 16 * 1024 * 1024 }
  const v2 = await run('docker', ['compose', '-f', FILE, 'config'], opts).catch(() => undefined)
  if (v2) return parse(v2.stdout)
  const v1 = await run('docker-compose', ['-f', FILE, 'config'], opts).catch((e: { code?: string, stderr?: string }) => {
    throw new Error(e.code === 'ENOENT' ? 'no compose tool: run `bash .ci/system-deps` (installs docker-compose)' : `compose config failed: ${e.stderr}`)
  })
  return parse(v1.stdout)
}

const cfg = await composeConfig()
const svc = cfg.services as Record<string, any>
const PROCESSES = ['gateway', ...LANE_NAMES, 'worker-fraud', 'worker-tax', 'deck', 'tax-sandbox']
const netsOf = (s: any): string[] => Array.isArray(s.networks) ? s.networks : Object.keys(s.networks ?? {})
const hostPorts = (s: any): Array<{ host_ip?: string, published?: string | number }> => (s.ports ?? []).map((p: any) => typeof p === 'string' ? { published: p.split(':').at(-2), host_ip: p.split(':').length > 2 ? p.split(':')[0] : undefined } : p)
const dbUser = (url: string): string => new URL(url).username

t.test('the file parses, and each process is its own service of the one image', async t => {
  for (const p of PROCESSES) {
    t.ok(svc[p], `${p} is a service`)
    if (p === 'tax-sandbox') {
      t.match(svc[p].build, { dockerfile: 'deploy/Dockerfile', target: 'demo' }, 'the sandbox runs the demo target (the production image has no sales-tax)')
      t.not(svc[p].image, svc.gateway.image, 'under its own image name')
    } else {
      t.equal(svc[p].image, svc.gateway.image, `${p} runs the fleet image`)
      t.equal(svc[p].build?.target, undefined, `${p}: the production (default) target`)
    }
    t.equal([svc[p].command].flat()[0], p.startsWith('worker-') ? 'worker' : p, `${p} runs its own process`)
  }
  t.ok(svc.postgres && svc.migrate, 'PostgreSQL and the migrate job')
})

t.test('health checks, and CPU and memory limits per lane', async t => {
  for (const p of [...PROCESSES, 'postgres']) {
    t.ok(svc[p].healthcheck && !svc[p].healthcheck.disable && svc[p].healthcheck.test, `${p} has a health check`)
    t.ok(Number(svc[p].cpus) > 0, `${p} cpus ${svc[p].cpus}`)
    t.ok(svc[p].mem_limit, `${p} mem_limit ${svc[p].mem_limit}`)
  }
  t.ok(Number(svc['card-auth'].cpus) > Number(svc.tax.cpus), 'the P0 lane gets more CPU than the P2 lane')
})

t.test('lanes and PostgreSQL are reachable only on internal networks', async t => {
  const internal = new Set(Object.entries(cfg.networks as Record<string, any>)
    .filter(([, n]) => n?.internal).map(([k]) => k))
  for (const p of [...LANE_NAMES, 'worker-fraud', 'worker-tax', 'postgres', 'tax-sandbox']) {
    t.ok(netsOf(svc[p]).every(n => internal.has(n)), `${p} only on internal networks (${netsOf(svc[p]).join(', ')})`)
    t.same(hostPorts(svc[p]), [], `${p} publishes no port`)
  }
  t.same(hostPorts(svc.gateway).map(p => String(p.published)), ['8080'], 'the gateway is the data-plane port')
  t.ok(hostPorts(svc.deck).every(p => p.host_ip === '127.0.0.1'), 'the deck is published on the host loopback only')
  t.notOk(netsOf(svc.gateway).includes('data'), 'the gateway cannot reach PostgreSQL')
  const onData = Object.keys(svc).filter(k => netsOf(svc[k]).includes('data')).sort()
  t.same(onData, ['card-auth', 'deck', 'fraud', 'migrate', 'postgres', 'tax', 'worker-fraud', 'worker-tax'], 'only lanes, workers, deck and migrate reach PostgreSQL')
})

t.test('the gateways share their retry limits in a redis only they reach', async t => {
  const internal = new Set(Object.entries(cfg.networks as Record<string, any>)
    .filter(([, n]) => n?.internal).map(([k]) => k))
  t.ok(svc.redis, 'a redis service')
  t.ok(netsOf(svc.redis).length > 0 && netsOf(svc.redis).every(n => internal.has(n)), `on internal networks only (${netsOf(svc.redis).join(', ')})`)
  t.same(hostPorts(svc.redis), [], 'publishing no port')
  const withRedis = Object.keys(svc).filter(k => k !== 'redis' && netsOf(svc[k]).some(n => netsOf(svc.redis).includes(n))).sort()
  t.same(withRedis, ['gateway'], 'the gateway is the only service on its network')
  t.equal(svc.gateway.environment?.REDIS_URL, 'redis://redis:6379', 'the gateway\'s REDIS_URL is that service')
  t.equal(String(svc.gateway.environment?.GATEWAY_REPLICAS), '1', 'and it shares each limit by the gateways that run (1 unless scaled)')
  t.ok(svc.redis.healthcheck?.test, 'redis has a health check')
  t.ok(Number(svc.redis.cpus) > 0 && svc.redis.mem_limit, 'and CPU and memory limits')
  t.ok(svc.redis.read_only, 'a read-only root: it persists nothing')
  t.notOk(JSON.stringify(svc.gateway.depends_on ?? {}).includes('service_healthy') && JSON.stringify(svc.gateway.depends_on).includes('redis'), 'the gateway does not wait for redis to be healthy: it serves without it')
})

t.test('each lane connects as its own role; workers share only jobs_ds', async t => {
  const users = Object.fromEntries(LANE_NAMES.map(l => [l, dbUser(svc[l].environment.DATABASE_URL)]))
  t.same(users, { 'card-auth': 'card_auth_ds', fraud: 'fraud_ds', tax: 'tax_ds' })
  t.equal(dbUser(svc.deck.environment.DATABASE_URL), 'deck_ds')
  t.equal(dbUser(svc['worker-fraud'].environment.DATABASE_URL), 'jobs_ds')
  t.equal(dbUser(svc['worker-fraud'].environment.FRAUD_DATABASE_URL), 'fraud_ds', 'fraud jobs run as the fraud role')
  t.equal(dbUser(svc['worker-tax'].environment.TAX_DATABASE_URL), 'tax_ds')
})

t.test('lanes scale with --scale alone: no replica count to keep in step', async t => {
  for (const lane of LANE_NAMES) {
    t.notOk(svc[lane].container_name, `${lane}: no container_name (it would forbid a second replica)`)
    t.equal(svc[lane].environment[`${envPrefix(lane)}REPLICAS`], undefined, `${lane}: ${envPrefix(lane)}REPLICAS unset, so each replica's share follows the ones that run`)
    t.equal(laneLimits(lane, {}).db.replicas, 0, `${lane}: unset means shares follow the live replicas`)
  }
})

t.test('every process agrees with the fleet table: process, port, health check, database role', async t => {
  for (const p of FLEET) {
    const s = svc[p.name]
    t.ok(s, `${p.name} is a service`)
    t.equal([s.command].flat()[0], p.entry, `${p.name}: runs ${p.entry}`)
    const e = s.environment ?? {}
    // The image's health check reads the port from this variable, with the table's default.
    t.ok([undefined, String(p.port)].includes(e[p.portEnv]), `${p.name}: ${p.portEnv} unset or ${p.port}`)
    const targets = (s.ports ?? []).map((x: any) => Number(typeof x === 'string' ? x.split('/')[0]!.split(':').at(-1) : x.target))
    t.ok(targets.every((x: number) => x === p.port), `${p.name}: published ports target ${p.port} (${targets.join(', ') || 'none published'})`)
    t.match([s.healthcheck.test].flat().join(' '), /dist\/services\/healthcheck\.js/, `${p.name}: the image's health check (${p.health.live})`)
    t.equal(e.DATABASE_URL ? dbUser(e.DATABASE_URL) : undefined, p.role, `${p.name}: DATABASE_URL role ${p.role ?? '(none)'}`)
    if (p.lane) t.equal(dbUser(e[`${envPrefix(p.lane)}DATABASE_URL`]), LANE_DEFAULTS[p.lane].role, `${p.name}: runs ${p.lane} jobs as ${LANE_DEFAULTS[p.lane].role}`)
  }
})
