// The alternatives of BULKHEAD-PAY-001's comparison, built from the fleet's own
// code: the gateway app and the three lane apps in ONE process, on ONE pg pool
// of 60 connections (one role, the database owner's, as a monolith has one
// datasource).
//
//   TOPOLOGY=A  one admission limit of 500 in flight shared by every lane (the
//               "500 threads"), with a deep wait queue behind it, as a thread
//               pool's work queue would be;
//   TOPOLOGY=B  each lane's own admission bulkhead from the lane table
//               (75/30/15 permits, queues 10/5/0), but the pool still shared.
//
// Both are made here, around the lane apps as the fleet builds them: the lane
// kit has no option for them.
//
// Only npm run bench -- compare starts this. Env: DATABASE_URL, DATA_DIR (the
// fleet's: API keys and the tax certificate), GATEWAY_PORT, TAX_PROVIDER_URL,
// TAX_QUOTE_DEADLINE_MS. Prints one JSON line {"up":true,...} when listening.
import path from 'node:path'
import pg from 'pg'
import { buildApp as buildGateway } from '../../gateway/app.ts'
import { fileKeySource } from '../../gateway/auth.ts'
import { RETRY_GUARD_DEFAULTS } from '../../gateway/retry-guard.ts'
import { buildApp as buildCardAuth } from '../../services/card-auth/app.ts'
import { buildApp as buildFraud } from '../../services/fraud/app.ts'
import { buildApp as buildTax } from '../../services/tax/app.ts'
import { DEFAULT_TABLE_FILE } from '../../services/tax/compensation/table.ts'
import { TAX_ENV } from '../../services/tax/config.ts'
import { loadConfig } from '../../shared/config.ts'
import { Bulkhead } from '../../shared/bulkhead.ts'
import { LANE_NAMES, envPrefix, laneLimits, type LaneLimits, type LaneName } from '../../shared/lanes.ts'

const env = process.env
const topology = env.TOPOLOGY
if (topology !== 'A' && topology !== 'B') throw new Error('TOPOLOGY must be A or B')
const dataDir = path.resolve(env.DATA_DIR ?? '.data')
const SHARED_POOL = Number(env.SHARED_POOL_MAX ?? 60)
const CONCURRENCY = Number(env.MONOLITH_CONCURRENCY ?? 500)

if (topology === 'A') {
  // No per-lane limit of its own: neither in the lanes nor in the gateway's per-lane caps.
  for (const lane of LANE_NAMES) {
    env[`${envPrefix(lane)}PERMITS`] = String(CONCURRENCY)
    env[`${envPrefix(lane)}QUEUE`] = '10000'
    env[`${envPrefix(lane)}QUEUE_WAIT_MS`] = '60000'
  }
}
// The monolith's one pool is bigger than any lane role's limit: the lane table's
// per-role budget check does not apply to it.
for (const lane of LANE_NAMES) env[`${envPrefix(lane)}POOL_MAX`] = String(SHARED_POOL)
const limits = Object.fromEntries(LANE_NAMES.map(n => [n, laneLimits(n)])) as Record<LaneName, LaneLimits>

// One pool for every lane. The lanes make theirs with `new pg.Pool` (createLanePool,
// application_name watertight-<lane>); here each of those is a view of this one:
// the pool's own methods run on it, what a lane sets on its pool (the leak
// detector's wrappers) stays on the view, and only the monolith ends it. The
// rest of what the lane kit does with its pool runs as in the fleet.
const pool = new pg.Pool({
  connectionString: env.DATABASE_URL,
  max: SHARED_POOL,
  idleTimeoutMillis: 0,
  connectionTimeoutMillis: limits['card-auth'].deadlineMs,
  statement_timeout: limits['card-auth'].db.statementTimeoutMs,
  application_name: `watertight-monolith-${topology}`,
})
pool.on('error', err => console.error(JSON.stringify({ level: 'error', msg: 'idle pg client error', err: String(err) })))
const OwnPool = pg.Pool
const lanePool = new RegExp(`^watertight-(${LANE_NAMES.join('|')})$`)
const view = (): pg.Pool => {
  const own: Record<PropertyKey, unknown> = { end: async () => {} }
  return new Proxy(pool, {
    get: (p, k) => {
      if (k in own) return own[k]
      const v = Reflect.get(p, k) as unknown
      return typeof v === 'function' ? v.bind(p) : v
    },
    set: (_p, k, v) => { own[k] = v; return true },
  })
}
pg.Pool = function (o?: pg.PoolConfig) {
  return lanePool.test(o?.application_name ?? '') ? view() : new OwnPool(o)
} as unknown as typeof pg.Pool

const logger = { level: env.LOG_LEVEL ?? 'warn' }
const lanes = {
  'card-auth': (await buildCardAuth({ limits: limits['card-auth'], databaseUrl: env.DATABASE_URL!, logger })).app,
  fraud: (await buildFraud({ limits: limits.fraud, databaseUrl: env.DATABASE_URL!, logger })).app,
  tax: (await buildTax({
    limits: limits.tax,
    databaseUrl: env.DATABASE_URL!,
    logger,
    providerUrl: env.TAX_PROVIDER_URL!,
    quoteDeadlineMs: Number(env.TAX_QUOTE_DEADLINE_MS ?? 2_000),
    compensation: { tableFile: DEFAULT_TABLE_FILE, certificateFile: path.join(dataDir, 'tax-certificate.json'), maxAgeMs: 168 * 3_600_000 },
    // The shared-pool service of INC-4491 had no breaker either.
    breaker: loadConfig(TAX_ENV, { TAX_BREAKER: 'off' }),
  })).app,
}
// A: every lane's own bulkhead is 500 wide (above), and one admission limit of
// 500 in flight is shared by all of them, taken before each handler and given
// back when the answer is sent or the client is gone, as a thread pool would.
if (topology === 'A') {
  const shared = new Bulkhead({ permits: CONCURRENCY, queue: 10_000, queueWaitMs: 60_000 })
  for (const app of Object.values(lanes)) {
    app.addHook('preHandler', async (req, reply) => {
      if (!req.routeOptions.url?.startsWith('/v1/')) return
      const gone = new AbortController()
      const onClose = (): void => { if (!reply.raw.writableFinished) gone.abort() }
      reply.raw.once('close', onClose)
      try {
        const permit = await shared.acquire(gone.signal)
        reply.raw.once('close', () => permit.release())
      } catch {
        reply.raw.off('close', onClose)
        return reply.code(503).header('retry-after', '1').send({ code: 'ERR_LANE_OVERLOADED', status: 503, title: 'all 500 threads busy' })
      }
    })
  }
}
const laneUrls = {} as Record<LaneName, string>
for (const lane of LANE_NAMES) laneUrls[lane] = await lanes[lane].listen({ port: 0, host: '127.0.0.1' })
const { app: gateway } = await buildGateway({
  limits,
  laneUrls,
  keys: fileKeySource(path.join(dataDir, 'api-keys.json')),
  retry: RETRY_GUARD_DEFAULTS,
  maxEventLoopDelayMs: 500,
  logger,
})
const gatewayUrl = await gateway.listen({ port: Number(env.GATEWAY_PORT ?? 0), host: '127.0.0.1' })
console.log(JSON.stringify({ up: true, topology, gatewayUrl, laneUrls, pid: process.pid }))

const stop = (): void => {
  const force = setTimeout(() => process.exit(1), 10_000)
  force.unref()
  Promise.allSettled([gateway.close(), ...Object.values(lanes).map(a => a.close())])
    .then(() => pool.end()).then(() => process.exit(0), () => process.exit(1))
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
