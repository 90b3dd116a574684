// Bootstrap of a lane process: read env, validate, build, check the DB role,
// listen, and drain on SIGTERM/SIGINT or when the supervisor is gone. The app
// itself never listens (app.ts).
import type { FastifyInstance } from 'fastify'
import { Type } from 'typebox'
import { loadConfig } from '../config.ts'
import { laneLimits, type LaneLimits, type LaneName } from '../lanes.ts'
import { assertRole, retrying, START_BUDGET_MS, warmPool } from '../db/pool.ts'
import { laneRoleBudget, StartBudget } from '../db/start-wait.ts'
import { loggerOptions } from '../http-app.ts'
import type { LaneKit } from './build-lane-app.ts'
import { onShutdown } from '../lifecycle.ts'
import { failStart } from '../start-failure.ts'
import { exercise } from './warm-up.ts'
import { startTracing } from '../tracing.ts'

const ProcessEnv = Type.Object({
  DATABASE_URL: Type.String({ minLength: 1, description: 'connection string with the lane role' }),
})

type Build = (cfg: { limits: LaneLimits, databaseUrl: string, logger: ReturnType<typeof loggerOptions> }) => Promise<{
  app: FastifyInstance, kit: LaneKit
}>

/** `warmPath`: the lane's read route for an id no row has, run once before the lane reports ready. */
export async function runLane (lane: LaneName, build: Build, warmPath: string): Promise<void> {
  let app: FastifyInstance | undefined
  try {
    const env = loadConfig(ProcessEnv, process.env)
    await startTracing(lane)
    const limits = laneLimits(lane)
    const built = await build({ limits, databaseUrl: env.DATABASE_URL, logger: loggerOptions(lane) })
    app = built.app
    // Waits while the role's CONNECTION LIMIT is full (a rollout's old replica still holds it), saying so once.
    const budget = new StartBudget({ name: lane, log: app.log }).for(laneRoleBudget(limits))
    await assertRole(built.kit.pool, limits.db.role, budget)
    // This replica's share among the live ones, before the pool warms to it.
    await built.kit.share.start()
    built.kit.warmUp.begin()
    await app.listen({ port: limits.port, host: limits.host })
    // The rest of the pool opens after the lane listens: a lane restarted while
    // its killed predecessor's backends still hold the role's connection limit
    // must not stay down until they are gone. It is ready once warm (warm-up.ts):
    // the pool opened as far as it could, and the hot path run once.
    const log = app.log
    const served = app
    const { share } = built.kit
    // A replica joining others waits (a few heartbeats at most) for them to
    // give up its share before it warms and reports ready.
    void share.settle(5 * limits.db.replicaHeartbeatMs).then(() => warmFully(built.kit)).then(async warmed => {
      const poolMax = share.poolMax
      if (warmed < poolMax) log.warn({ warmed, poolMax }, 'pool warm-up opened fewer connections than its max; the rest open on demand')
      const status = await exercise(served, warmPath)
      built.kit.warmUp.finish()
      log.info({ warmed, hotPath: warmPath, status }, 'warm: ready')
      // From now on a pool below its share (the share grew, a connection died) is opened again, one warm-up at a time.
      let growing = false
      share.onGrow(max => {
        if (growing) return
        growing = true
        void warmPool(built.kit.pool, max).finally(() => { growing = false })
      })
    })
  } catch (err) {
    await app?.close().catch(() => {})
    failStart(lane, err)
  }
  onShutdown(app!.log, () => app!.close())
}

/**
 * The pool warmed to this replica's share, tried again with backoff while the
 * role refuses (a killed predecessor's backends still hold it): each try ends
 * at the first refusal and leaves what it opened idle for requests. Gives up
 * after the start budget; the rest then opens on demand. Resolves with how
 * many are open.
 */
async function warmFully (kit: LaneKit): Promise<number> {
  const short = new Error('pool not warm yet')
  return retrying(async () => {
    const warmed = await warmPool(kit.pool, kit.share.poolMax)
    if (warmed < kit.share.poolMax && !kit.pool.ending) throw short
    return warmed
  }, START_BUDGET_MS, () => kit.pool.ending).catch(() => kit.pool.totalCount)
}
