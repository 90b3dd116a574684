// The peers in `npm run bench -- queue --peers`: pg-boss and graphile-worker,
// through their public APIs, each in a database of its own on the same server
// as ours, with the settings their own docs give for throughput:
//  - graphile-worker 0.18: concurrentJobs 24, maxPoolSize 25, localQueue 500,
//    completeJobBatchDelay 0, failJobBatchDelay 0 (worker.graphile.org/docs/performance).
//    Its only limit enforced in the database is a named queue (one job at a
//    time); the nearest to MaxWorkers 10 is ten named queues, jobs dealt out
//    round robin (never more than 10 at once, by construction).
//  - pg-boss 12: LISTEN/NOTIFY on, batchSize 500, burstWhenBatchFull, two local
//    workers (localConcurrency 2, like our two processes). Its limit is
//    groupConcurrency (tracked in the database across nodes; its docs say it
//    can be briefly exceeded): every job in one group, groupConcurrency 10.
// Each subject is measured as ours is (measure.ts): release, then poll until
// the database shows no job left.
import pg from 'pg'
import { PgBoss } from 'pg-boss'
import { Logger, makeWorkerUtils, run, type Runner } from 'graphile-worker'
import { concurrently, countRows, intervalsUs, maxOverlap, paced, percentile, settle, until, type Figures } from './measure.ts'

export interface PeerOptions {
  superUrl: string
  jobs: number
  singleJobs: number
  limit: number
  latency: { jobs: number, rate: number }
  capMs: number
  log: (m: string) => void
}

async function database (superUrl: string, name: string): Promise<string> {
  const c = new pg.Client({ connectionString: superUrl })
  await c.connect()
  await c.query(`drop database if exists ${name} with (force)`)
  await c.query(`create database ${name}`)
  await c.end()
  const u = new URL(superUrl); u.pathname = '/' + name
  return u.toString()
}

export async function pgBoss (o: PeerOptions): Promise<Figures> {
  const url = await database(o.superUrl, 'bench_pgboss')
  const pool = new pg.Pool({ connectionString: url, max: 2 })
  const boss = new PgBoss({ connectionString: url, max: 10, useListenNotify: true, schedule: false, supervise: false })
  boss.on('error', err => o.log(`pg-boss: ${String(err)}`))
  await boss.start()
  const f: Figures = {}
  try {
    for (const q of ['free', 'limit', 'lat']) await boss.createQueue(q, { notify: true })
    const left = (q: string) => (probe: boolean): Promise<number> =>
      countRows(pool, "select 1 from pgboss.job where name = $1 and state < 'completed'", [q], probe)
    const tuned = { batchSize: 500, localConcurrency: 2, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5 }

    f.enqueueSingle = await concurrently(o.singleJobs, 8, i => boss.send('lat', { i }))
    await pool.query("delete from pgboss.job where name = 'lat'")
    let t0 = performance.now()
    await boss.insert('free', Array.from({ length: o.jobs }, (_, i) => ({ data: { i } })))
    f.enqueueBulk = o.jobs / ((performance.now() - t0) / 1000)

    await settle(pool)
    t0 = performance.now()
    let id = await boss.work('free', tuned, async () => {})
    let r = await until(left('free'), t0, o.capMs)
    f.unlimited = (o.jobs - r.left) / (r.ms / 1000)
    await boss.offWork('free', { id, wait: true })

    // Latency: paced single sends to idle workers.
    id = await boss.work('lat', tuned, async () => {})
    await paced(o.latency.jobs, o.latency.rate, i => boss.send('lat', { i }))
    await until(left('lat'), performance.now(), 60_000)
    const lat = (await pool.query<{ ms: number }>("select extract(epoch from completed_on - created_on)::float8 * 1000 as ms from pgboss.job where name = 'lat' and state = 'completed' order by 1")).rows.map(x => x.ms)
    f.p50Ms = percentile(lat, 50); f.p99Ms = percentile(lat, 99)
    await boss.offWork('lat', { id, wait: true })

    await boss.insert('limit', Array.from({ length: o.jobs }, (_, i) => ({ data: { i }, group: { id: 'g' } })))
    await settle(pool)
    t0 = performance.now()
    id = await boss.work('limit', { ...tuned, batchSize: o.limit, groupConcurrency: o.limit }, async () => {})
    r = await until(left('limit'), t0, o.capMs)
    f.limited = (o.jobs - r.left) / (r.ms / 1000); f.limitedLeft = r.left
    await boss.offWork('limit', { id, wait: true })
    f.maxActive = maxOverlap(await intervalsUs(pool,
      `select (extract(epoch from started_on) * 1e6)::bigint::text as s, (extract(epoch from completed_on) * 1e6)::bigint::text as e
         from pgboss.job where name = 'limit' and state = 'completed'`))
  } finally {
    await boss.stop({ graceful: false, close: true }).catch(err => o.log(`pg-boss stop: ${String(err)}`))
    await pool.end()
  }
  return f
}

export async function graphileWorker (o: PeerOptions): Promise<Figures> {
  const url = await database(o.superUrl, 'bench_graphile')
  const pool = new pg.Pool({ connectionString: url, max: 2 })
  // Quiet, as ours runs (its default logger prints a line per job).
  const logger = new Logger(() => (level, message) => { if (level === 'error') o.log(`graphile-worker: ${message}`) })
  const utils = await makeWorkerUtils({ connectionString: url, logger })
  await utils.migrate()
  const f: Figures = {}
  const left = (probe: boolean): Promise<number> => countRows(pool, 'select 1 from graphile_worker._private_jobs', [], probe)
  // A job's row is deleted when it completes, so its active span (locked_at
  // to completion, like ours: claim to completion) is kept by a trigger of
  // ours on that delete, in the limited run only.
  await pool.query(`create table bench_spans (s timestamptz, e timestamptz);
    create function bench_span() returns trigger language plpgsql as $$
    begin insert into bench_spans values (old.locked_at, clock_timestamp()); return old; end $$`)
  const latencies: number[] = []
  let record: 'none' | 'latency' = 'none'
  const start = (localQueue = true): Promise<Runner> => run({
    noHandleSignals: true,
    logger,
    taskList: {
      noop: async (_payload, helpers) => {
        if (record === 'latency') latencies.push(Date.now() - new Date(helpers.job.created_at).getTime())
      },
    },
    preset: {
      worker: {
        connectionString: url,
        concurrentJobs: 24,
        maxPoolSize: 25,
        localQueue: { size: localQueue ? 500 : -1 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
  })
  let runner: Runner | undefined
  try {
    f.enqueueSingle = await concurrently(o.singleJobs, 8, i => utils.addJob('noop', { i }))
    await pool.query('delete from graphile_worker._private_jobs')
    let t0 = performance.now()
    await utils.addJobs(Array.from({ length: o.jobs }, (_, i) => ({ identifier: 'noop', payload: { i } })))
    f.enqueueBulk = o.jobs / ((performance.now() - t0) / 1000)

    // Its runner starts inside the timed span (a few tens of ms of the run).
    await settle(pool)
    t0 = performance.now()
    runner = await start()
    let r = await until(left, t0, o.capMs)
    f.unlimited = (o.jobs - r.left) / (r.ms / 1000)

    record = 'latency'
    await paced(o.latency.jobs, o.latency.rate, i => utils.addJob('noop', { i }))
    await until(left, performance.now(), 60_000)
    latencies.sort((x, y) => x - y)
    f.p50Ms = percentile(latencies, 50); f.p99Ms = percentile(latencies, 99)
    await runner.stop(); runner = undefined

    await utils.addJobs(Array.from({ length: o.jobs }, (_, i) => ({ identifier: 'noop', payload: { i }, queueName: `lim-${i % o.limit}` })))
    record = 'none'
    await pool.query('create trigger bench_span after delete on graphile_worker._private_jobs for each row execute function bench_span()')
    await settle(pool)
    t0 = performance.now()
    // Without the local queue here: with it, jobs of a named queue wait in one
    // pool's local queue behind that queue's lock (5 jobs/s in a trial run).
    runner = await start(false)
    r = await until(left, t0, o.capMs)
    f.limited = (o.jobs - r.left) / (r.ms / 1000); f.limitedLeft = r.left
    f.maxActive = maxOverlap(await intervalsUs(pool,
      'select (extract(epoch from s) * 1e6)::bigint::text as s, (extract(epoch from e) * 1e6)::bigint::text as e from bench_spans'))
  } finally {
    await runner?.stop().catch(() => {})
    await utils.release()
    await pool.end()
  }
  return f
}
