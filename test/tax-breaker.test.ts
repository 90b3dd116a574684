// The tax provider's circuit breaker, on real processes: the sandbox hangs (then
// answers in 8 s); the lane's breaker opens on its slow calls, answers every
// quote from the certified table with no provider call (the sandbox's own
// counter moves only by the breaker's probes), half-opens, and closes once the
// provider heals. worker-tax's breaker holds the reconcile queue meanwhile: no
// job claimed, none dead-lettered, no attempt spent; after the heal every quote
// is reconciled. (Slow-call threshold 300 ms, probe after 1 s, a window of 10
// calls with 5 at least: the defaults' shape, shorter.)
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { certify } from '../services/tax/compensation/certify.ts'
import { DEFAULT_TABLE_FILE } from '../services/tax/compensation/table.ts'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually } from './helpers/http.ts'
import { startWorker } from './helpers/queue.ts'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-breaker-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const certFile = path.join(dir, 'certificate.json')
const BREAKER = { TAX_BREAKER_SLOW_CALL_MS: '300', TAX_BREAKER_HALF_OPEN_AFTER_MS: '1000', TAX_BREAKER_WINDOW_CALLS: '10', TAX_BREAKER_MIN_CALLS: '5' }
const env = { ...BREAKER, TAX_CERTIFICATE_FILE: certFile, TAX_QUOTE_DEADLINE_MS: '2000' }
const db = await testDatabase(t, env)
const fleet = await startFleet(t, db, { lanes: ['tax'], env })
const tax = fleet.lanes.tax!
const certificate = await certify({ tableFile: DEFAULT_TABLE_FILE, providerUrl: fleet.sandbox.url })
fs.writeFileSync(certFile, JSON.stringify(certificate))
t.ok(await eventually(async () => (await call(tax.url + '/compensation')).body.certified === true, 8_000, 100), 'the lane loaded the certificate')

const quote = (jurisdiction = 'DE') => fleet.post('/v1/tax/quotes', { jurisdiction, amount: { value: 10_000, currency: 'EUR' } })
const breakerOf = async (url: string) => (await call(url + '/status')).body.breakers[0] as { dependency: string, state: string, since: string, probes: number, shortCircuited: number }
/** Quotes the sandbox was asked, all modes; one caller's only (its User-Agent, services/tax/provider.ts) when named. */
const providerCalls = async (caller?: string): Promise<number> => {
  const text = String((await call(fleet.sandbox.url + '/metrics')).body)
  return [...text.matchAll(/^sandbox_quotes_total\{([^}]*)\} (\S+)$/gm)]
    .filter(m => caller === undefined || m[1]!.includes(`caller="${caller}"`))
    .reduce((n, m) => n + Number(m[2]), 0)
}
const metric = async (url: string, series: string): Promise<number> => Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(String((await call(url + '/metrics')).body))?.[1] ?? NaN)

t.test('the lane: opens on slow calls, answers from the table without calling, closes when the provider heals', async t => {
  const ok = await Promise.all(Array.from({ length: 3 }, () => quote()))
  t.same(ok.map(r => r.body.source), ['provider', 'provider', 'provider'], 'a healthy provider answers')
  t.equal((await breakerOf(tax.url)).state, 'closed')

  await fleet.setFaults({ mode: 'hang' })
  // Ten quotes at once take ten permits and ten calls to the hung provider; at
  // 300 ms each counts as slow, the breaker opens, and every one of them is
  // answered from the table then, not at the 2 s quote deadline.
  const first = await Promise.all(Array.from({ length: 10 }, () => quote()))
  t.same(first.map(r => r.status), Array(10).fill(200))
  t.same(first.map(r => r.headers['x-tax-compensation']), Array(10).fill('breaker_open'), 'the calls in flight were cut when it opened')
  t.ok(first.every(r => r.body.source === 'compensation' && r.body.rate > 0), 'certified rates, never zero')
  const open = await breakerOf(tax.url)
  t.not(open.state, 'closed', 'the breaker is open (or probing)')
  t.ok(await eventually(async () => tax.log.some(l => l.includes('tax-provider breaker open')), 5_000, 50), 'one line says it opened, and why')

  // Open: quotes answered at once from the table, the provider sees only probes.
  const callsBefore = await providerCalls()
  const [quotesBefore, probeCallsBefore] = [await providerCalls('tax'), await providerCalls('tax probe')]
  const probesBefore = (await breakerOf(tax.url)).probes
  const during = await Promise.all(Array.from({ length: 40 }, () => quote()))
  t.same(during.map(r => r.headers['x-tax-compensation']), Array(40).fill('breaker_open'))
  const us = await Promise.all(Array.from({ length: 5 }, () => quote('US-NV')))
  t.same(us.map(r => r.body.code), Array(5).fill('ERR_TAX_PROVIDER_FAILED'), 'a jurisdiction without a table rate is refused, never given a made-up rate')
  // Let at least one probe go out and fail (half-open, then open again).
  t.ok(await eventually(async () => (await breakerOf(tax.url)).probes >= probesBefore + 1 && (await breakerOf(tax.url)).state === 'open', 10_000, 50), 'the breaker probed and stayed open')
  const probes = (await breakerOf(tax.url)).probes - probesBefore
  const calls = (await providerCalls()) - callsBefore
  t.ok(calls <= probes, `45 quotes, ${calls} provider calls: its probes (${probes}) only`)
  t.equal(await providerCalls('tax') - quotesBefore, 0, 'the provider counted no quote of the lane\'s (by User-Agent)')
  t.ok(await providerCalls('tax probe') - probeCallsBefore >= 1, 'and the lane\'s probes as probes')
  t.ok((await breakerOf(tax.url)).shortCircuited >= 45, 'each quote was short-circuited')
  t.equal(await metric(tax.url, 'dependency_breaker_state{dependency="tax-provider",state="open",process="tax"}'), 1, 'the gauge says open')
  t.ok(await metric(tax.url, 'dependency_breaker_transitions_total{dependency="tax-provider",to="open",process="tax"}') >= 2, 'opened, and again after a failed probe')

  // Healed: the next probe answers, the breaker closes, the provider quotes again.
  await fleet.setFaults({ mode: 'normal' })
  t.ok(await eventually(async () => (await breakerOf(tax.url)).state === 'closed', 10_000, 50), 'closed after the provider healed')
  t.equal((await quote()).body.source, 'provider', 'the provider answers quotes again')
  t.ok(await eventually(async () => tax.log.some(l => l.includes('tax-provider breaker closed')), 5_000, 50), 'and a line says so')
})

t.test('the lane: an 8 s provider opens it the same way', async t => {
  await fleet.setFaults({ latencyMs: 8_000 })
  const first = await Promise.all(Array.from({ length: 10 }, () => quote('FR')))
  t.same(first.map(r => r.headers['x-tax-compensation']), Array(10).fill('breaker_open'))
  t.not((await breakerOf(tax.url)).state, 'closed')
  await fleet.setFaults({ mode: 'normal' })
  t.ok(await eventually(async () => (await breakerOf(tax.url)).state === 'closed', 10_000, 50), 'closed after the heal')
})

t.test('the reconcile worker: its breaker holds the queue, no job lost, dead-lettered or charged an attempt', async t => {
  const pending = async () => (await db.query<{ n: number }>("select count(*)::int as n from tax.quotes where source = 'compensation' and reconciled_at is null"))[0]!.n
  const owed = await pending()
  t.ok(owed >= 20, `compensated quotes to reconcile: ${owed}`)
  await fleet.setFaults({ mode: 'hang' })
  const hungBefore = await providerCalls()
  // Its own window (TAX_RECONCILE_BREAKER_*), left at the defaults: more than half of the last 5.
  const worker = await startWorker(t, db, ['tax-reconcile'], {
    ...BREAKER,
    TAX_RECONCILE_PER_SECOND: '50',
    TAX_DATABASE_URL: db.laneUrl('tax', env),
    TAX_PROVIDER_URL: fleet.sandbox.url,
  })
  t.ok(await eventually(async () => (await breakerOf(worker.url)).state !== 'closed', 15_000, 50), 'the worker\'s breaker opened on its hung calls')
  // MaxWorkers (3) calls run at once, and no slot frees until it opens: one
  // round of them. Under the lane's window here (5 calls at least) it took two.
  const hung = await providerCalls() - hungBefore
  t.equal(hung, 3, `it opened after one round of hung calls (${hung})`)
  // Held: the jobs it had claimed went back, the others were never claimed.
  t.ok(await eventually(async () => (await db.query("select 1 from jobs.jobs_hot where queue = 'tax-reconcile' and status = 'processing'")).length === 0, 10_000, 50), 'no reconcile job is running')
  const callsBefore = await providerCalls()
  const probesBefore = (await breakerOf(worker.url)).probes
  t.ok(await eventually(async () => (await breakerOf(worker.url)).probes >= probesBefore + 1 && (await breakerOf(worker.url)).state === 'open', 10_000, 50), 'it probed and stayed open')
  t.ok((await providerCalls()) - callsBefore <= (await breakerOf(worker.url)).probes - probesBefore, 'the provider saw only its probes')
  const jobs = await db.query<{ attempts: number }>("select attempts from jobs.jobs_hot where queue = 'tax-reconcile'")
  t.equal(jobs.length, owed, 'every job is still queued')
  t.ok(jobs.every(j => j.attempts === 0), 'and none was charged an attempt for waiting')
  t.equal((await db.query("select 1 from jobs.jobs_dead where queue = 'tax-reconcile'")).length, 0, 'none dead-lettered')

  await fleet.setFaults({ mode: 'normal' })
  t.ok(await eventually(async () => await pending() === 0, 30_000, 200), 'after the heal every quote is reconciled')
  t.equal((await breakerOf(worker.url)).state, 'closed')
  t.equal((await db.query("select 1 from jobs.jobs_dead where queue = 'tax-reconcile'")).length, 0, 'still none dead-lettered')
})

t.test('the reconcile worker leaves probing to the lane while the lane\'s breaker is open', async t => {
  await fleet.setFaults({ mode: 'hang' })
  // The lane opens on its quotes, and compensates them: reconcile jobs for the worker.
  const first = await Promise.all(Array.from({ length: 10 }, () => quote()))
  t.same(first.map(r => r.headers['x-tax-compensation']), Array(10).fill('breaker_open'))
  const laneRows = async () => (await db.query<{ breaker: string }>('select breaker from tax.lane_replicas')).map(r => r.breaker)
  t.ok(await eventually(async () => { const b = await laneRows(); return b.length > 0 && !b.includes('closed') }, 5_000, 50), 'the lane\'s row says its breaker is not closed')

  const worker = await startWorker(t, db, ['tax-reconcile'], {
    ...BREAKER,
    TAX_RECONCILE_PER_SECOND: '50',
    TAX_RECONCILE_PROBE_MAX_MS: '2000',
    TAX_DATABASE_URL: db.laneUrl('tax', env),
    TAX_PROVIDER_URL: fleet.sandbox.url,
  })
  t.ok(await eventually(async () => (await breakerOf(worker.url)).state !== 'closed', 15_000, 50), 'the worker\'s breaker opened on its hung calls')
  const workerProbeCalls = await providerCalls('worker-tax probe')
  const laneProbeCalls = await providerCalls('tax probe')
  const probesBefore = (await breakerOf(worker.url)).probes
  t.ok(await eventually(async () => (await breakerOf(worker.url)).probes >= probesBefore + 2 && (await breakerOf(worker.url)).state === 'open', 10_000, 50), 'the worker probed twice and stayed open')
  t.equal(await providerCalls('worker-tax probe') - workerProbeCalls, 0, 'none of its probes called the provider')
  t.ok(await providerCalls('tax probe') - laneProbeCalls >= 1, 'the lane\'s did, meanwhile')

  await fleet.setFaults({ mode: 'normal' })
  t.ok(await eventually(async () => (await breakerOf(worker.url)).state === 'closed', 15_000, 50), 'after the heal the lane closes, and then the worker, on a probe of its own')
  t.ok(await providerCalls('worker-tax probe') - workerProbeCalls >= 1, 'which called the provider')
  const pending = async () => (await db.query<{ n: number }>("select count(*)::int as n from tax.quotes where source = 'compensation' and reconciled_at is null"))[0]!.n
  t.ok(await eventually(async () => await pending() === 0, 30_000, 200), 'every quote is reconciled')
})

t.test('a replay of a quote the lane answered lately is answered from the store: the provider is not asked', async t => {
  await fleet.setFaults({ mode: 'normal' })
  const key = `replay-${process.pid}`
  const body = { jurisdiction: 'DE', amount: { value: 10_000, currency: 'EUR' } }
  const before = await providerCalls('tax')
  const first = await fleet.post('/v1/tax/quotes', body, key)
  t.equal(first.body.source, 'provider', 'the first is the provider\'s')
  t.equal(await providerCalls('tax') - before, 1, 'one call')
  // Three: the gateway lets at most 4 attempts of a key through in 10 s.
  const replays = []
  for (let i = 0; i < 3; i++) replays.push(await fleet.post('/v1/tax/quotes', body, key))
  t.same(replays.map(r => [r.status, r.headers['idempotent-replayed'], r.body.id]), Array(3).fill([200, 'true', first.body.id]), 'three replays, each the stored quote')
  t.equal(await providerCalls('tax') - before, 1, 'and still that one call')
})
