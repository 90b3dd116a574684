// Two lanes, two worker processes, each killed with -9 mid-job: every zombie is
// judged by the rule of its own type (idempotent: re-run; not: dead-lettered as
// 'zombie') by a worker that knows that type — never by the other lane's worker,
// which does not know it. Until a worker that knows them is back, the other
// worker leaves them alone and reports them as stranded.
//
// The lane job types are the real ones: worker-fraud knows `fraud.score`,
// worker-tax knows `tax.reconcile`, both idempotent, each unknown to the other.
// They are held mid-job by a table lock the test holds (the lane roles get a long
// statement_timeout here, so the wait is not cut); the built-in `sleep` and
// `sleep-once` run beside them on each queue.
import crypto from 'node:crypto'
import http from 'node:http'
import type pg from 'pg'
import t from 'tap'
import { testDatabase } from '../helpers/db.ts'
import { call, eventually } from '../helpers/http.ts'
import { counts, enqueueMany, startWorker } from '../helpers/queue.ts'
import type { Proc } from '../helpers/procs.ts'

const roleEnv = { FRAUD_STATEMENT_TIMEOUT_MS: '300000', TAX_STATEMENT_TIMEOUT_MS: '300000' }
const db = await testDatabase(t, roleEnv)
// 2 s, not 1: a heartbeat every 200 ms stays well inside it on a loaded host, so no live job looks dead.
await db.query("update jobs.queues set zombie_timeout_seconds = 2, max_workers = null where name in ('fraud-async', 'tax-reconcile')")

// The tax provider: answers every quote (the re-run needs it; the first run never gets this far).
const provider = http.createServer((req, res) => {
  req.resume().on('end', () => { res.setHeader('content-type', 'application/json'); res.end(JSON.stringify({ jurisdiction: 'DE', rate: 0.19, tax: 190 })) })
})
await new Promise<void>(resolve => provider.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>(resolve => provider.close(() => resolve())))
const providerUrl = `http://127.0.0.1:${(provider.address() as { port: number }).port}`

// Two worker processes share the jobs_ds role's connection limit, as under npm start.
const workerEnv = { ...roleEnv, WORKER_REPLICAS: '2' }
const startFraudWorker = (name: string): Promise<Proc> =>
  startWorker(t, db, ['fraud-async'], { ...workerEnv, FRAUD_DATABASE_URL: db.laneUrl('fraud', roleEnv) }, name)
const startTaxWorker = (name: string): Promise<Proc> =>
  startWorker(t, db, ['tax-reconcile'], { ...workerEnv, TAX_DATABASE_URL: db.laneUrl('tax', roleEnv), TAX_PROVIDER_URL: providerUrl }, name)

/** Hold an ACCESS EXCLUSIVE lock on a lane table until release(): the lane's job blocks on its first read. */
async function holdTable (table: string): Promise<{ release: () => Promise<void> }> {
  const c: pg.PoolClient = await db.pool.connect()
  await c.query('begin')
  await c.query(`lock table ${table} in access exclusive mode`)
  let held = true
  const release = async (): Promise<void> => {
    if (!held) return
    held = false
    await c.query('commit').catch(() => {})
    c.release()
  }
  t.teardown(release)
  return { release }
}

const processing = async (queue: string): Promise<number> =>
  (await db.query("select 1 from jobs.jobs_hot where queue = $1 and status = 'processing'", [queue])).length

/** queue_zombies_stranded of one worker, as { 'queue type': jobs }. */
async function stranded (w: Proc): Promise<Record<string, number>> {
  const text = (await call(w.url + '/metrics')).body as string
  const out: Record<string, number> = {}
  for (const m of text.matchAll(/^queue_zombies_stranded\{([^}]*)\} (\S+)$/gm)) {
    const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map(l => [l[1]!, l[2]!]))
    out[`${labels.queue} ${labels.type}`] = Number(m[2])
  }
  return out
}

/** How many of a queue's jobs a worker reports as stranded. */
const strandedIn = async (w: Proc, queue: string): Promise<number> =>
  Object.entries(await stranded(w)).filter(([k]) => k.startsWith(queue + ' ')).reduce((n, [, v]) => n + v, 0)

const byType = async (table: 'jobs_archive' | 'jobs_dead', queue: string): Promise<Array<{ type: string, attempts: number, reason?: string }>> =>
  db.query(`select type, attempts${table === 'jobs_dead' ? ', reason' : ''} from jobs.${table} where queue = $1 order by type, id`, [queue])

t.test('each lane\'s zombies are judged by a worker that knows their type, never by the other lane\'s worker', async t => {
  const screenings = [crypto.randomUUID(), crypto.randomUUID()]
  for (const [i, id] of screenings.entries()) {
    await db.query(`insert into fraud.screenings (id, client_id, idempotency_key, fingerprint, card_token, merchant_id, amount, currency, mode, status, response)
                    values ($1, 'c_zombie', $2, 'fp', 'tok_zombie_1', 'm_zombie', 100, 'EUR', 'async', 'queued', '{}')`, [id, `k${i}`])
  }
  const quotes = [crypto.randomUUID(), crypto.randomUUID()]
  for (const [i, id] of quotes.entries()) {
    await db.query(`insert into tax.quotes (id, client_id, idempotency_key, fingerprint, jurisdiction, amount, currency, rate, tax, total, source, table_version, response)
                    values ($1, 'c_zombie', $2, 'fp', 'DE', 1000, 'EUR', 0.19, 190, 1190, 'compensation', 'test', '{}')`, [id, `k${i}`])
  }
  const fraudLock = await holdTable('fraud.screenings')
  const taxLock = await holdTable('tax.quotes')
  const workerFraud = await startFraudWorker('worker-fraud')
  let workerTax = await startTaxWorker('worker-tax')

  // 1. worker-fraud dies mid-job; worker-tax lives on.
  for (const id of screenings) await enqueueMany(db, 'fraud-async', 'fraud.score', 1, { screeningId: id })
  await enqueueMany(db, 'fraud-async', 'sleep', 1, { ms: 4_000 })
  await enqueueMany(db, 'fraud-async', 'sleep-once', 1, { ms: 4_000 })
  for (const id of quotes) await enqueueMany(db, 'tax-reconcile', 'tax.reconcile', 1, { quoteId: id })
  t.ok(await eventually(async () => await processing('fraud-async') === 4 && await processing('tax-reconcile') === 2, 15_000, 20), 'all fraud-async jobs and the tax.reconcile jobs running')
  await workerFraud.kill('SIGKILL')
  // Until worker-tax has looked at them long enough to call them stranded (or, as before the fix, judged them).
  t.ok(await eventually(async () => await processing('fraud-async') < 4 || await strandedIn(workerTax, 'fraud-async') === 4, 20_000, 100), 'worker-tax looked at the fraud-async zombies')
  t.same(await byType('jobs_dead', 'fraud-async'), [], 'worker-tax dead-lettered none of them')
  t.equal(await processing('fraud-async'), 4, 'worker-tax left all 4 for a worker that knows them')
  t.same(await stranded(workerTax), { 'fraud-async fraud.score': 2, 'fraud-async sleep': 1, 'fraud-async sleep-once': 1 }, 'worker-tax reports them as stranded')

  await fraudLock.release()
  const workerFraud2 = await startFraudWorker('worker-fraud-2')
  t.ok(await eventually(async () => { const c = await counts(db, 'fraud-async'); return c.hot === 0 && c.archive + c.dead === 4 }, 30_000, 100), 'fraud-async settled')
  t.same(await byType('jobs_archive', 'fraud-async'), [{ type: 'fraud.score', attempts: 2 }, { type: 'fraud.score', attempts: 2 }, { type: 'sleep', attempts: 2 }], 'fraud.score and sleep (idempotent) re-ran and completed')
  t.same(await byType('jobs_dead', 'fraud-async'), [{ type: 'sleep-once', attempts: 1, reason: 'zombie' }], 'sleep-once (not idempotent) dead-lettered as zombie, not re-run')
  t.same((await db.query('select status from fraud.screenings where id = any($1::uuid[])', [screenings])).map(r => r.status), ['final', 'final'], 'both screenings scored')

  // 2. worker-tax dies mid-job; the new worker-fraud lives on.
  await enqueueMany(db, 'tax-reconcile', 'sleep', 1, { ms: 4_000 })
  await enqueueMany(db, 'tax-reconcile', 'sleep-once', 1, { ms: 4_000 })
  t.ok(await eventually(async () => await processing('tax-reconcile') === 4, 15_000, 20), 'all tax-reconcile jobs running')
  await workerTax.kill('SIGKILL')
  t.ok(await eventually(async () => await processing('tax-reconcile') < 4 || await strandedIn(workerFraud2, 'tax-reconcile') === 4, 20_000, 100), 'worker-fraud looked at the tax-reconcile zombies')
  t.same(await byType('jobs_dead', 'tax-reconcile'), [], 'worker-fraud dead-lettered none of them')
  t.equal(await processing('tax-reconcile'), 4, 'worker-fraud left all 4 for a worker that knows them')
  t.same(await stranded(workerFraud2), { 'tax-reconcile sleep': 1, 'tax-reconcile sleep-once': 1, 'tax-reconcile tax.reconcile': 2 }, 'worker-fraud reports them as stranded')

  await taxLock.release()
  workerTax = await startTaxWorker('worker-tax-2')
  t.ok(await eventually(async () => { const c = await counts(db, 'tax-reconcile'); return c.hot === 0 && c.archive + c.dead === 4 }, 30_000, 100), 'tax-reconcile settled')
  t.same(await byType('jobs_archive', 'tax-reconcile'), [{ type: 'sleep', attempts: 2 }, { type: 'tax.reconcile', attempts: 2 }, { type: 'tax.reconcile', attempts: 2 }], 'tax.reconcile and sleep (idempotent) re-ran and completed')
  t.same(await byType('jobs_dead', 'tax-reconcile'), [{ type: 'sleep-once', attempts: 1, reason: 'zombie' }], 'sleep-once (not idempotent) dead-lettered as zombie, not re-run')
  t.same((await db.query('select reconciled_rate from tax.quotes where id = any($1::uuid[])', [quotes])).map(r => Number(r.reconciled_rate)), [0.19, 0.19], 'both quotes reconciled')

  t.ok(await eventually(async () => Object.keys(await stranded(workerFraud2)).length === 0 && Object.keys(await stranded(workerTax)).length === 0, 10_000, 100), 'nothing stranded once every lane has a worker')
})
