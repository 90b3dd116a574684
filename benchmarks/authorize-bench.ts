// `npm run bench -- authorize`: what card_auth.authorize_batch (the card-auth lane's
// group commit) costs PostgreSQL per authorization, alone. One connection to an
// embedded server of its own calls it with batches of new keys spread over 1,000
// load cards, in autocommit (each batch durable when it returns, as the lane's
// writer does), and the backend's CPU is read from /proc/<pid>/stat. No lane and
// no HTTP: the database's share of `bench:cost`, with far less noise, for
// changes to the SQL. With `--baseline NNNN` the function as migration NNNN made
// it runs beside the current one (as card_auth.authorize_batch_NNNN), the two
// alternated run by run.
import crypto from 'node:crypto'
import pg from 'pg'
import { bootstrapDatabase, localSecrets } from '../shared/db/bootstrap.ts'
import { loadCardToken, seedLoadCards } from '../services/card-auth/seed.ts'
import { functionAsOf } from '../test/helpers/migrations.ts'
import { fillAuthorizations } from './card-table.ts'
import { cpuUs } from './proc-cpu.ts'
import { gitCommit, machine, numberFlag, parseFlags } from './run-info.ts'

const { values: a } = parseFlags({
  options: {
    sizes: { type: 'string', default: '1,4,8,16' },
    authorizations: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '3' },
    baseline: { type: 'string' },
    rows: { type: 'string', default: '200000' },
  }
}, 'npm run bench -- authorize [--sizes 1,4,8,16] [--authorizations 2000] [--rounds 3] [--rows 200000] [--baseline 0009]')
const sizes = String(a.sizes).split(',').map(Number)
if (sizes.some(s => !Number.isInteger(s) || s < 1 || s > 500)) throw new Error('--sizes: batch sizes from 1 to 500')
const perRun = numberFlag(a, 'authorizations', 10, 1_000_000)
const rounds = numberFlag(a, 'rounds', 1, 50)
const argv = process.argv.slice(2)
const command = `npm run bench -- authorize${argv.length ? ' -- ' + argv.join(' ') : ''}`

const dataDir = '.data/bench-authorize'
const db = await bootstrapDatabase({
  dataDir,
  port: 18391,
  database: 'bench',
  secrets: localSecrets(dataDir),
  log: m => console.error(m),
})
const c = new pg.Client({ connectionString: db.superUrl })
try {
  await c.connect()
  await seedLoadCards(c, 1_000)
  const functions = ['authorize_batch']
  if (a.baseline) {
    const b = functionAsOf(String(a.baseline), 'card_auth.authorize_batch')
    await c.query(b.sql)
    functions.push(b.name.replace('card_auth.', ''))
  }
  await fillAuthorizations(c, numberFlag(a, 'rows', 0, 50_000_000))
  const { rows: [table] } = await c.query<{ n: string }>("select reltuples::bigint as n from pg_class where oid = 'card_auth.authorizations'::regclass")
  const pid = (await c.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid
  let seq = 0
  const run = async (fn: string, size: number): Promise<number> => {
    const calls = Math.ceil(perRun / size)
    const q = { name: fn, text: `select * from card_auth.${fn}($1, $2, $3, $4, $5, $6, $7, $8)` }
    const before = cpuUs(pid)!
    for (let j = 0; j < calls; j++) {
      const b = { ids: [] as string[], clients: [] as string[], keys: [] as string[], cards: [] as string[] }
      for (let i = 0; i < size; i++) {
        seq++
        b.ids.push(crypto.randomUUID()); b.clients.push('bench'); b.keys.push(`authorize-bench-${process.pid}-${seq}`); b.cards.push(loadCardToken(seq * 37))
      }
      const { rows } = await c.query({
        ...q,
        values: [
          b.ids,
          b.clients,
          b.keys,
          b.ids.map(() => 'fp'),
          b.ids.map(() => 'm_bench'),
          b.cards,
          b.ids.map(() => 1),
          b.ids.map(() => 'EUR'),
        ],
      })
      if (rows.length !== size || rows.some(r => r.status !== 'approved')) throw new Error(`${fn}: not every authorization approved: ${JSON.stringify(rows[0])}`)
    }
    return (cpuUs(pid)! - before) / (calls * size)
  }
  for (const fn of functions) await run(fn, 8) // warm-up: plans, caches
  const results = new Map<string, number[]>()
  for (const size of sizes) {
    for (let r = 0; r < rounds; r++) {
      for (const fn of functions) {
        const k = `${fn}/${size}`
        results.set(k, [...(results.get(k) ?? []), await run(fn, size)])
      }
    }
  }
  const cell = (xs: number[]): string => `${xs.map(x => x.toFixed(0)).join(' / ')} (mean ${(xs.reduce((s, x) => s + x, 0) / xs.length).toFixed(0)})`
  console.log(`\n${command}`)
  console.log(`${new Date().toISOString()}, commit ${gitCommit()}, ${machine({ kernel: true })}`)
  console.log(`One connection, autocommit, ${perRun.toLocaleString('en')} authorizations a run, ${rounds} runs per batch size, functions alternated; card_auth.authorizations ${Number(table!.n).toLocaleString('en')} rows at the start. Backend CPU (utime+stime) per authorization, µs.\n`)
  console.log(`| batch size | ${functions.join(' | ')} |`)
  console.log(`|---:|${functions.map(() => '---:').join('|')}|`)
  for (const size of sizes) console.log(`| ${size} | ${functions.map(fn => cell(results.get(`${fn}/${size}`)!)).join(' | ')} |`)
} finally {
  await c.end().catch(() => {})
  await db.embedded?.stop()
}
