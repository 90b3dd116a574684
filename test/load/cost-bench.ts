// `npm run bench:cost`: what one card authorization costs in CPU, process by
// process. Starts the fleet (npm start's supervisor, its own data directory and
// ports), drives POST /v1/authorizations through the gateway open loop at each
// given rate, and reads every fleet process's CPU (and every PostgreSQL backend's,
// by the role it connects as) from /proc before and after each run. Prints CPU µs
// per authorization for each, the end-to-end figure the issue's budget is about
// (gateway + card-auth + its card_auth_ds backends), latency and answers.
// At a low rate a process's fixed per-wakeup cost dominates: read it at the rate
// you care about.
import pg from 'pg'
import { Pool } from 'undici'
import { loadCardToken, seedLoadCards } from '../../services/card-auth/seed.ts'
import { fillAuthorizations } from './card-table.ts'
import { runOpenLoop, summary } from './open-loop.ts'
import { hasTaskset, pinSelf, startLocalFleet } from './local-fleet.ts'
import { cpuByPid, cpuDeltaByLabel, cpuUs, fleetProcesses } from './proc-cpu.ts'
import { gatewayPost, gitCommit, machine, numberFlag, parseFlags, sleep } from './run-info.ts'

const { values: a } = parseFlags({ options: {
  rates: { type: 'string', default: '200,700,1400' },
  seconds: { type: 'string', default: '15' },
  'fleet-cpus': { type: 'string' },
  'generator-cpus': { type: 'string' },
  'base-port': { type: 'string', default: '18480' },
  rows: { type: 'string', default: '200000' },
} })
const rates = a.rates!.split(',').map(Number)
const seconds = numberFlag(a, 'seconds', 1, 3_600)
const command = `npm run bench:cost -- --rates ${a.rates} --seconds ${seconds}${a.rows !== '200000' ? ` --rows ${a.rows}` : ''}${a['fleet-cpus'] ? ` --fleet-cpus ${a['fleet-cpus']}` : ''}${a['generator-cpus'] ? ` --generator-cpus ${a['generator-cpus']}` : ''}`
const END_TO_END = ['gateway', 'card-auth', 'pg:card_auth_ds']

/** The server's WAL so far (pg_stat_wal): bytes, and full-page images among them. */
async function walNow (db: pg.Client): Promise<{ bytes: number, fpi: number, commits: number }> {
  // Commits from the backends' reported statistics, which a busy backend sends at most once a second.
  const { rows: [w] } = await db.query<{ bytes: string, fpi: string, commits: string }>('select wal_bytes as bytes, wal_fpi as fpi, (select xact_commit from pg_stat_database where datname = current_database()) as commits from pg_stat_wal')
  return { bytes: Number(w!.bytes), fpi: Number(w!.fpi), commits: Number(w!.commits) }
}

const fleet = await startLocalFleet({ dataDir: '.data/bench-cost', basePort: numberFlag(a, 'base-port', 1_024, 60_000), cpus: a['fleet-cpus'], env: { LOG_LEVEL: 'warn' } })
if (a['generator-cpus'] && hasTaskset()) pinSelf(a['generator-cpus'])
try {
  const db = new pg.Client({ connectionString: fleet.databaseUrl })
  await db.connect()
  await seedLoadCards(db, 1_000)
  // The planner's statistics as a running fleet's autovacuum keeps them. A bench's
  // fleet lives about a minute, less than autovacuum's first look at the database
  // (autovacuum_naptime, 60 s), so without this the lane's statements are planned
  // for tables never analyzed: a bitmap scan for a unique key's one row. And a
  // table of some size first: analyzed empty is worse (card-table.ts).
  await fillAuthorizations(db, numberFlag(a, 'rows', 0, 50_000_000))
  // The bench's data directory keeps what earlier runs wrote: say how big the table is.
  const table = (await db.query<{ n: string, size: string, buffers: string }>("select reltuples::bigint as n, pg_size_pretty(pg_total_relation_size('card_auth.authorizations')) as size, current_setting('shared_buffers') as buffers from pg_class where oid = 'card_auth.authorizations'::regclass")).rows[0]!
  const tableNote = `card_auth.authorizations ${Number(table.n).toLocaleString('en')} rows (${table.size} with indexes) at the start, shared_buffers ${table.buffers}`
  console.log(tableNote)
  const gw = new Pool(fleet.gatewayUrl, { connections: 256 })
  let n = 0
  const send = async (): Promise<number> => {
    const i = ++n
    const r = await gatewayPost(gw, fleet.apiKey, '/v1/authorizations', `cost-${process.pid}-${i}`, { merchantId: 'm_cost', cardToken: loadCardToken(i), amount: { value: 1, currency: 'EUR' } })
    await r.body.dump()
    return r.statusCode
  }
  await runOpenLoop({ rate: Math.min(...rates), durationMs: 3_000, send }) // warm-up (JIT, pools)
  const results: Array<{ rate: number, sent: number, ok: number, p50: number, p99: number, perReq: Map<string, number>, sysPerReq: Map<string, number>, generator: number, walBytes: number, walFpi: number, commits: number }> = []
  for (const rate of rates) {
    await sleep(2_000)
    const procs = await fleetProcesses(fleet.pid, db)
    const before = cpuByPid(procs)
    const sys0 = cpuByPid(procs, 'system')
    const gen0 = cpuUs(process.pid)!
    const wal0 = await walNow(db)
    const r = await runOpenLoop({ rate, durationMs: seconds * 1000, send })
    const after = cpuByPid(procs)
    const sys1 = cpuByPid(procs, 'system')
    const gen1 = cpuUs(process.pid)!
    await sleep(1_500) // the backends' statistics of the run's last second
    const wal1 = await walNow(db)
    const served = r.completed
    const perReq = new Map([...cpuDeltaByLabel(procs, before, after)].map(([label, us]) => [label, us / served]))
    const sysPerReq = new Map([...cpuDeltaByLabel(procs, sys0, sys1)].map(([label, us]) => [label, us / served]))
    const s = summary(r.histogram)
    results.push({ rate, sent: r.sentRate, ok: (r.statuses['201'] ?? 0) / r.scheduled, p50: s.p50Ms, p99: s.p99Ms, perReq, sysPerReq, generator: (gen1 - gen0) / served, walBytes: (wal1.bytes - wal0.bytes) / served, walFpi: (wal1.fpi - wal0.fpi) / served, commits: (wal1.commits - wal0.commits) / served })
    console.log(`rate ${rate}: sent ${r.sentRate.toFixed(0)}/s, 201 ${(100 * (r.statuses['201'] ?? 0) / r.scheduled).toFixed(1)}%, p50 ${s.p50Ms.toFixed(1)} ms, p99 ${s.p99Ms.toFixed(1)} ms, end to end ${END_TO_END.reduce((x, l) => x + (perReq.get(l) ?? 0), 0).toFixed(0)} µs/auth`)
  }
  await gw.close()
  await db.end()

  const labels = [...new Set(results.flatMap(r => [...r.perReq.keys()]))].sort((x, y) => (results.at(-1)!.perReq.get(y) ?? 0) - (results.at(-1)!.perReq.get(x) ?? 0))
  const cell = (v: number | undefined): string => v === undefined ? '—' : v.toFixed(0)
  console.log(`\n${command}`)
  console.log(`${new Date().toISOString()}, commit ${gitCommit()}, ${machine({ kernel: true })}; fleet cpus ${fleet.pinned ?? 'all'}, generator cpus ${a['generator-cpus'] ?? 'all'}`)
  console.log(`POST /v1/authorizations through the gateway, open loop; CPU from /proc/<pid>/stat (utime+stime) over each run, divided by the answers; ${tableNote}.\n`)
  console.log(`| CPU µs per authorization | ${results.map(r => `${r.rate}/s`).join(' | ')} |`)
  console.log(`|---|${results.map(() => '---:').join('|')}|`)
  console.log(`| **end to end: gateway + card-auth + pg:card_auth_ds** | ${results.map(r => `**${END_TO_END.reduce((x, l) => x + (r.perReq.get(l) ?? 0), 0).toFixed(0)}**`).join(' | ')} |`)
  for (const l of labels) console.log(`| ${l} | ${results.map(r => `${cell(r.perReq.get(l))}${END_TO_END.includes(l) ? ` (kernel ${cell(r.sysPerReq.get(l))})` : ''}`).join(' | ')} |`)
  console.log(`| whole fleet | ${results.map(r => [...r.perReq.values()].reduce((x, y) => x + y, 0).toFixed(0)).join(' | ')} |`)
  console.log(`| load generator (this process) | ${results.map(r => r.generator.toFixed(0)).join(' | ')} |`)
  console.log(`| commits per authorization, whole database (1 / the mean group commit) | ${results.map(r => r.commits.toFixed(3)).join(' | ')} |`)
  console.log(`| WAL bytes (full-page images) per authorization, whole server | ${results.map(r => `${r.walBytes.toFixed(0)} (${r.walFpi.toFixed(2)})`).join(' | ')} |`)
  console.log(`| sent req/s | ${results.map(r => r.sent.toFixed(0)).join(' | ')} |`)
  console.log(`| answered 201 | ${results.map(r => `${(r.ok * 100).toFixed(1)}%`).join(' | ')} |`)
  console.log(`| latency p50 / p99 ms | ${results.map(r => `${r.p50.toFixed(1)} / ${r.p99.toFixed(1)}`).join(' | ')} |`)
} finally {
  await fleet.stop()
}
