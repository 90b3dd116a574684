// `npm run bench -- queue [--peers]`: the job queue's throughput on this
// machine, on one embedded PostgreSQL of its own (default settings, durable:
// fsync and synchronous_commit on). No-op jobs. For each subject, in one run,
// back to back, `--rounds` times (the table gives the range):
//  - enqueue jobs/s: single (8 concurrent connections) and bulk (one call);
//  - claim+complete jobs/s with no limit, and under a limit that binds
//    (MaxWorkers --limit for us, each peer's nearest equivalent);
//  - for us, the same queue unlimited at the limit's concurrency (what the
//    limit costs is measured against that): --pairs limited and equal runs,
//    alternated, and the cost from the median of each;
//  - latency from enqueue to completion, p50/p99, paced single enqueues to
//    idle workers;
//  - the most jobs ever active at once under the limit, from per-job start/end
//    timestamps.
// Ours runs twice: as library calls in this process, and through two of the
// fleet's worker processes. With --peers, pg-boss and graphile-worker run
// beside it through their public APIs, each in its own database on the same
// server. benchmarks/queue-bench/*.ts hold the subjects.
import { execFileSync } from 'node:child_process'
import os from 'node:os'
import pg from 'pg'
import { bootstrapDatabase, localSecrets } from '../shared/db/bootstrap.ts'
import { jobsRoleName } from '../shared/lanes.ts'
import { gitCommit, machine, numberFlag, parseFlags } from './run-info.ts'
import type { Figures } from './queue-bench/measure.ts'
import { oursLibrary, oursWorkers } from './queue-bench/ours.ts'

const { values: a } = parseFlags({
  options: {
    peers: { type: 'boolean', default: false },
    only: { type: 'string', default: '' },
    rounds: { type: 'string', default: '2' },
    jobs: { type: 'string', default: '20000' },
    'single-jobs': { type: 'string', default: '5000' },
    limit: { type: 'string', default: '10' },
    claimers: { type: 'string', default: '2' },
    'claimer-slots': { type: 'string', default: '250' },
    // The flag's name before --peers (README); the same thing.
    batch: { type: 'string' },
    'worker-slots': { type: 'string', default: '100' },
    'latency-jobs': { type: 'string', default: '2000' },
    'latency-rate': { type: 'string', default: '500' },
    'cap-s': { type: 'string', default: '20' },
    pairs: { type: 'string', default: '5' },
  },
})
const o = {
  rounds: numberFlag(a, 'rounds', 1, 20),
  jobs: numberFlag(a, 'jobs', 100, 1_000_000),
  singleJobs: numberFlag(a, 'single-jobs', 10, 1_000_000),
  limit: numberFlag(a, 'limit', 1, 1_000),
  claimers: numberFlag(a, 'claimers', 1, 64),
  claimerSlots: a.batch !== undefined ? numberFlag(a, 'batch', 1, 10_000) : numberFlag(a, 'claimer-slots', 1, 10_000),
  workerSlots: numberFlag(a, 'worker-slots', 1, 1_000),
  latency: { jobs: numberFlag(a, 'latency-jobs', 10, 100_000), rate: numberFlag(a, 'latency-rate', 1, 100_000) },
  capMs: numberFlag(a, 'cap-s', 1, 3_600) * 1000,
  pairs: numberFlag(a, 'pairs', 1, 20),
}
const argv = process.argv.slice(2)
const command = `npm run bench -- queue${argv.length ? ' -- ' + argv.join(' ') : ''}`
const only = new Set(String(a.only).split(',').filter(Boolean))

const dataDir = '.data/bench-queue'
const log = (m: string): void => { console.error(m) }
const db = await bootstrapDatabase({ dataDir, port: 18389, database: 'bench', secrets: localSecrets(dataDir), log })
const pool = new pg.Pool({ connectionString: db.superUrl, max: 12 })
const server = (await pool.query<{ server_version: string }>('show server_version')).rows[0]!.server_version
const settings = (await pool.query<{ name: string, setting: string }>("select name, setting from pg_settings where name in ('fsync', 'synchronous_commit', 'shared_buffers', 'wal_level')")).rows

interface Subject { name: string, mode: string, run (): Promise<Figures> }
const subjects: Subject[] = [
  { name: 'watertight (library calls)', mode: `${o.claimers} claimers x ${o.claimerSlots} slots; limit: MaxWorkers ${o.limit}, 2 x ${2 * o.limit} slots; equal: 2 x ${Math.ceil(o.limit / 2)}`, run: () => oursLibrary({ ...o, pool, jobsUrl: db.roleUrl(jobsRoleName()), log }) },
  { name: 'watertight (2 worker processes)', mode: `unlimited: WORKER_SLOTS ${o.workerSlots}; limit: MaxWorkers ${o.limit}, WORKER_SLOTS ${2 * o.limit}; equal: WORKER_SLOTS ${Math.ceil(o.limit / 2)}; otherwise production defaults (poll 1 s, heartbeat 2 s, rescue 5 s, pool 4 + LISTEN each)`, run: () => oursWorkers({ ...o, pool, jobsUrl: db.roleUrl(jobsRoleName()), log }) },
]
if (a.peers) {
  const { graphileWorker, pgBoss } = await import('./queue-bench/peers.ts')
  const p = { ...o, superUrl: db.superUrl, log }
  subjects.push(
    { name: 'graphile-worker 0.18', mode: `concurrentJobs 24, maxPoolSize 25, localQueue 500, completeJobBatchDelay 0; limit: ${o.limit} named queues, jobs round robin (a named queue runs one job at a time)`, run: () => graphileWorker(p) },
    { name: 'pg-boss 12', mode: `LISTEN/NOTIFY, batchSize 500, burstWhenBatchFull, localConcurrency 2; limit: groupConcurrency ${o.limit}, every job in one group, batchSize ${o.limit}`, run: () => pgBoss(p) }
  )
}

const results = new Map<string, Figures[]>()
try {
  for (let round = 1; round <= o.rounds; round++) {
    for (const s of subjects) {
      if (only.size && ![...only].some(k => s.name.includes(k))) continue
      log(`round ${round}: ${s.name} (load average ${os.loadavg().map(x => x.toFixed(2)).join(' ')})`)
      const f = await s.run()
      log(`  ${JSON.stringify(f)}`)
      results.set(s.name, [...(results.get(s.name) ?? []), f])
    }
  }
} finally {
  await pool.end()
  // A peer's pool may still hold an idle client when the server goes: its
  // "terminating connection due to administrator command" is no failure here.
  process.on('uncaughtException', err => { if ((err as { code?: string }).code !== '57P01') throw err })
  await db.embedded?.stop()
}

const fmt = (xs: Array<number | undefined>, digits = 0): string => {
  const v = xs.filter((x): x is number => x !== undefined && Number.isFinite(x))
  if (v.length === 0) return '—'
  const lo = Math.min(...v); const hi = Math.max(...v)
  const f = (x: number): string =>
    x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
  return f(lo) === f(hi) ? f(lo) : `${f(lo)}–${f(hi)}`
}
let commit = gitCommit()
try { commit += ` (${execFileSync('git', ['log', '-1', '--format=%cs'], { encoding: 'utf8' }).trim()})` } catch { /* no git */ }
console.log(`\n${command}`)
console.log(`${new Date().toISOString()}, commit ${commit}, ${machine({ kernel: true })}, load average at the end ${os.loadavg().map(x => x.toFixed(2)).join(' ')}`)
console.log(`PostgreSQL ${server} (embedded, ${settings.map(s => `${s.name}=${s.setting}`).join(', ')}); ${o.jobs.toLocaleString('en-US')} no-op jobs per run (single enqueue: ${o.singleJobs.toLocaleString('en-US')}), ${o.rounds} rounds, ranges are min–max; ours: under the limit and at the limit's concurrency are each the median of ${o.pairs} alternated runs per round (after an untimed short run of each), and the limit cost is 1 − their ratio\n`)
console.log('| queue | enqueue single jobs/s | enqueue bulk jobs/s | claim+complete unlimited jobs/s | under the limit jobs/s | unlimited at the limit\'s concurrency jobs/s | limit cost | latency p50 / p99 ms | most active at once under the limit |')
console.log('|---|---|---|---|---|---|---|---|---|')
for (const s of subjects) {
  const r = results.get(s.name)
  if (!r) continue
  const cost = r.map(f => f.limited !== undefined && f.unlimitedEqual !== undefined
    ? 100 * (1 - f.limited / f.unlimitedEqual)
    : undefined)
  const left = Math.max(0, ...r.map(f => f.limitedLeft ?? 0))
  console.log(`| ${s.name} | ${fmt(r.map(f => f.enqueueSingle))} | ${fmt(r.map(f => f.enqueueBulk))} | ${fmt(r.map(f => f.unlimited))} | ${fmt(r.map(f => f.limited))}${left ? ` (cap hit: ${left} left)` : ''} | ${fmt(r.map(f => f.unlimitedEqual))} | ${cost.some(c => c !== undefined) ? fmt(cost, 1) + '%' : '—'} | ${fmt(r.map(f => f.p50Ms), 1)} / ${fmt(r.map(f => f.p99Ms), 1)} | ${fmt(r.map(f => f.maxActive))} |`)
}
console.log('\nSettings:')
for (const s of subjects) if (results.has(s.name)) console.log(`- ${s.name}: ${s.mode}`)
