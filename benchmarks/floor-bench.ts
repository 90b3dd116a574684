// `npm run bench:floor`: what this machine allows a shed answer with nothing of
// the fleet in the way — the floor under two of issue 15's criteria, each shed
// tax request answered in under 5 ms as the client sees it (the drill) and every
// shed answer of a burst within 5 ms at the lane (bench:burst). On an otherwise
// idle machine:
//   - paced requests at --rates (the drill's tax stream is 150/s), latency from
//     each request's scheduled send time, along paths that grow towards the
//     fleet's, from a C client (benchmarks/floor/pingpong.c, when a C compiler is
//     here): to a C server on loopback (the machine alone), to a bare node:http
//     server answering at once, through a bare proxy (node:http and an undici
//     Pool, the gateway's hop) to it, and through the proxy to a bare server
//     that answers after one durable INSERT (autocommit, synchronous_commit on);
//     then that last path from the drill's own generator (runOpenLoop, undici);
//   - bursts of --burst requests at once through the proxy to a bare server that
//     answers each after the group commit it joined (one connection, one INSERT a
//     batch, as the lanes' writer does): each request's time in that server,
//     arrival to answer (the lane's `Server-Timing: answer`).
// No Fastify, no validation, no bulkhead, no other load: whatever misses 5 ms
// here, the fleet misses too. Prints the command, date, commit and machine.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { Pool } from 'undici'
import { bootstrapDatabase, localSecrets } from '../shared/db/bootstrap.ts'
import { newHistogram, runOpenLoop, summary } from './open-loop.ts'
import { gitCommit, machine, numberFlag, parseFlags, serverTiming } from './run-info.ts'

const usage = 'npm run bench:floor -- [--rates 30,150] [--seconds 15] [--burst 45] [--rounds 5]'
const { values: a } = parseFlags({
  options: {
    rates: { type: 'string', default: '30,150' },
    seconds: { type: 'string', default: '15' },
    burst: { type: 'string', default: '45' },
    rounds: { type: 'string', default: '5' },
  }
}, usage)
const rates = String(a.rates).split(',').map(Number)
if (rates.some(r => !(r >= 1 && r <= 5_000))) { console.error(`--rates: request rates from 1 to 5000 per second\n${usage}`); process.exit(2) }
const seconds = numberFlag(a, 'seconds', 1, 600)
const burst = numberFlag(a, 'burst', 1, 1_000)
const rounds = numberFlag(a, 'rounds', 1, 100)
const argv = process.argv.slice(2)
const command = `npm run bench:floor${argv.length ? ' -- ' + argv.join(' ') : ''}`
const here = path.dirname(fileURLToPath(import.meta.url))
const LIMIT_MS = 5

interface Row {
  path: string, rate: number, count: number, p50: number, p99: number, max: number, over: number, note?: string
}

/**
 * A C client paced at `rate`: to a C server of its own (the machine alone), or
 * to `port`; null without a C compiler.
 */
function cClient (name: string, rate: number, port?: number): Row | null {
  const bin = path.join(os.tmpdir(), `wt-floor-pingpong-${process.pid}`)
  try {
    if (!fs.existsSync(bin)) execFileSync('cc', ['-O2', '-o', bin, path.join(here, 'floor', 'pingpong.c')], { stdio: 'ignore' })
  } catch { return null }
  const out = execFileSync(bin, [String(rate), String(seconds), ...(port ? [String(port)] : [])], { encoding: 'utf8' })
  const r = JSON.parse(out) as { count: number, p50: number, p99: number, max: number, over5: number, errors: number }
  if (r.errors > 0) throw new Error(`${name}: ${r.errors} answers other than 200`)
  return { path: name, rate, count: r.count, p50: r.p50, p99: r.p99, max: r.max, over: r.over5 }
}

const children: ChildProcess[] = []
async function server (...args: string[]): Promise<number> {
  const child = spawn(process.execPath, [path.join(here, 'floor', 'servers.mjs'), ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
  children.push(child)
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout!.once('data', d => resolve(String(d).trim()))
    child.once('exit', code => reject(new Error(`floor server ${args.join(' ')} exited ${code}`)))
  })
  return Number(line.split(' ')[1])
}

const post = (pool: Pool, key: string) => pool.request({
  method: 'POST',
  path: '/v1/tax/quotes',
  headers: { 'content-type': 'application/json', 'idempotency-key': key },
  body: JSON.stringify({ jurisdiction: 'DE', amount: { value: 10_000, currency: 'EUR' } }),
})

async function paced (name: string, port: number, rate: number): Promise<Row> {
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: 64 })
  const run = `${process.pid}-${port}-${rate}-${Date.now()}`
  try {
    for (let i = 0; i < 200; i++) await (await post(pool, `${run}-warm-${i}`)).body.dump()
    let over = 0
    const r = await runOpenLoop({
      rate,
      durationMs: seconds * 1000,
      async send (i) { const res = await post(pool, `${run}-${i}`); await res.body.dump(); return res.statusCode },
      onResult (_i, _at, us) { if (us >= LIMIT_MS * 1000) over++ },
    })
    if (r.completed !== r.statuses['200']) throw new Error(`${name}: answers other than 200: ${JSON.stringify(r.statuses)}`)
    const s = summary(r.histogram)
    return { path: name, rate, count: s.count, p50: s.p50Ms, p99: s.p99Ms, max: s.maxMs, over, note: `the generator's own send lag p50 ${r.sendLag.p50Ms.toFixed(2)} ms` }
  } finally { await pool.close() }
}

const dataDir = '.data/bench-floor'
const db = await bootstrapDatabase({
  dataDir,
  port: 18_991,
  database: 'bench_floor',
  secrets: localSecrets(dataDir),
  log: m => console.error(m),
})
try {
  const c = new pg.Client({ connectionString: db.superUrl })
  await c.connect()
  await c.query('drop table if exists floor_quotes')
  await c.query('create table floor_quotes (id uuid primary key, idempotency_key text not null unique, body jsonb not null)')
  await c.end()
  const bare = await server('server', 'none')
  const proxied = await server('proxy', String(bare))
  const durable = await server('proxy', String(await server('server', 'insert', db.superUrl)))
  const grouped = await server('proxy', String(await server('server', 'group', db.superUrl)))

  const rows: Row[] = []
  for (const rate of rates) {
    for (const row of [
      cClient('C client → C server (the machine alone: no Node, no database)', rate),
      cClient('C client → bare node:http server', rate, bare),
      cClient('C client → bare proxy → bare server', rate, proxied),
      cClient('C client → bare proxy → bare server + one durable INSERT', rate, durable),
    ]) if (row) rows.push(row)
    rows.push(await paced('the drill\'s generator → bare proxy → bare server + one durable INSERT', durable, rate))
  }

  const bursts: string[] = []
  const pool = new Pool(`http://127.0.0.1:${grouped}`, { connections: burst + 10 })
  try {
    const shoot = async (key: string): Promise<{ lane: number, client: number }> => {
      const t0 = performance.now()
      const r = await post(pool, key)
      await r.body.dump()
      if (r.statusCode !== 200) throw new Error(`burst: answered ${r.statusCode}`)
      return { lane: serverTiming(r.headers['server-timing'], 'upstream') ?? NaN, client: performance.now() - t0 }
    }
    // The same histograms and percentiles as the paced rows (open-loop.ts).
    const ms = (xs: number[]) => {
      const h = newHistogram()
      for (const x of xs) h.recordValue(Math.max(1, Math.round(x * 1000)))
      return summary(h)
    }
    for (let r = -3; r < rounds; r++) {
      const shots = await Promise.all(Array.from({ length: burst }, (_, i) => shoot(`${process.pid}-burst-${r}-${i}`)))
      if (r < 0) continue // warm-up: connections opened, code optimized
      const lane = ms(shots.map(s => s.lane)); const client = ms(shots.map(s => s.client))
      bursts.push(`| ${r + 1} | ${lane.p50Ms.toFixed(2)} / ${lane.maxMs.toFixed(2)} | ${client.p50Ms.toFixed(2)} / ${client.maxMs.toFixed(2)} | ${shots.filter(s => !(s.lane < LIMIT_MS)).length} of ${burst} |`)
      await new Promise(resolve => setTimeout(resolve, 200))
    }
  } finally { await pool.close() }

  console.log(`\n${command}`)
  console.log(`${new Date().toISOString()}, commit ${gitCommit()}, ${machine({ kernel: true })}; nothing else running, nothing pinned`)
  console.log(`\nPaced, ${seconds} s a row, latency from each request's scheduled send time (ms):\n`)
  console.log(`| path | rate /s | requests | p50 | p99 | max | at or over ${LIMIT_MS} ms | |`)
  console.log('|---|---:|---:|---:|---:|---:|---:|---|')
  for (const r of rows) console.log(`| ${r.path} | ${r.rate} | ${r.count} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.max.toFixed(2)} | ${r.over} | ${r.note ?? ''} |`)
  if (!rows.some(r => r.path.startsWith('C '))) console.log('\n(no C compiler here: the C client\'s rows were not run)')
  console.log(`\n${burst} at once through the bare proxy to a bare server answering after its group commit, ${rounds} rounds (ms):\n`)
  console.log(`| round | in the server, arrival to answer: p50 / max | as the client saw them: p50 / max | at or over ${LIMIT_MS} ms in the server |`)
  console.log('|---:|---:|---:|---:|')
  console.log(bursts.join('\n'))
} finally {
  for (const c of children) c.kill()
  fs.rmSync(path.join(os.tmpdir(), `wt-floor-pingpong-${process.pid}`), { force: true })
  await db.embedded?.stop()
}
