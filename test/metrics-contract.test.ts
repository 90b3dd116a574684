// Every process serves the metric names of DESIGN §7 with the right types and
// labels, and its output is valid Prometheus text (promtool check metrics).
// A real fleet, a worker and the deck are scraped after some traffic that makes
// the interesting series exist: a shed tax request, a retry storm, a job.
import { execFile } from 'node:child_process'
import t, { type Test } from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startDeck } from './helpers/deck.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, sleep } from './helpers/http.ts'
import { startWorker } from './helpers/queue.ts'

// One tax permit, so a second concurrent quote is shed (fail_fast).
const env = { TAX_PERMITS: '1' }
const db = await testDatabase(t, env)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_metrics_1', 'EUR', 1000000)")
const fleet = await startFleet(t, db, { env })
const worker = await startWorker(t, db, ['fraud-async', 'tax-reconcile'], { ...env, FRAUD_DATABASE_URL: db.laneUrl('fraud', env), TAX_DATABASE_URL: db.laneUrl('tax', env), TAX_PROVIDER_URL: fleet.sandbox.url })
const deck = await startDeck(t, db, { cardAuth: fleet.lanes['card-auth']!.url, fraud: fleet.lanes.fraud!.url, tax: fleet.lanes.tax!.url, gateway: fleet.gateway.url })

// Traffic: an authorization and a screening; a retry storm (the 5th attempt of
// one key); tax shed while its one permit waits on a slow provider.
const auth = { merchantId: 'm_metrics', cardToken: 'tok_metrics_1', amount: { value: 100, currency: 'EUR' } }
for (let i = 0; i < 5; i++) await fleet.post('/v1/authorizations', auth, 'metrics-storm-key')
await fleet.post('/v1/fraud/screenings', { cardToken: 'tok_metrics_1', merchantId: 'm_metrics', amount: { value: 100, currency: 'EUR' }, ipCountry: 'DE', billingCountry: 'DE' })
await fleet.setFaults({ latencyMs: 300 })
await Promise.all(Array.from({ length: 4 }, (_, i) => fleet.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 1_000 + i, currency: 'EUR' } })))
await fleet.setFaults({ mode: 'normal' })
await db.query("select jobs.enqueue('fraud-async', 'noop', '{}'::jsonb, 0, 0, 5, null)")
await sleep(500)

interface Sample { name: string, labels: Record<string, string>, value: number }
interface Scrape { text: string, types: Map<string, string>, samples: Sample[] }

async function scrape (url: string): Promise<Scrape> {
  const text = (await call(url + '/metrics')).body as string
  const types = new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map(m => [m[1]!, m[2]!]))
  const samples = [...text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/gm)].map(m => ({
    name: m[1]!,
    labels: Object.fromEntries([...(m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)].map(l => [l[1]!, l[2]!])),
    value: Number(m[3]),
  }))
  return { text, types, samples }
}

/** promtool: 0 = valid, 3 = valid with lint findings, 1 = unparseable. */
function promtool (text: string): Promise<{ code: number, out: string }> {
  return new Promise((resolve, reject) => {
    const p = execFile('promtool', ['check', 'metrics'], (err, stdout, stderr) => {
      const e = err as (NodeJS.ErrnoException & { code?: number | string }) | null
      if (e?.code === 'ENOENT') reject(new Error('promtool is not installed: run `bash .ci/system-deps`'))
      else resolve({ code: typeof e?.code === 'number' ? e.code : 0, out: stdout + stderr })
    })
    p.stdin!.end(text)
  })
}

// prom-client's own default gauges end in _total; promtool's linter flags them. Ours must be clean.
const PROM_CLIENT_DEFAULT_LINT = /^nodejs_active_(handles|requests|resources)_total non-counter metrics should not have "_total" suffix$/

const labelsOf = (s: Scrape, name: string): string[][] =>
  s.samples.filter(x => x.name === name).map(x => Object.keys(x.labels).sort())
function expectMetric (t: Test, s: Scrape, name: string, type: string, labels?: string[]): void {
  t.equal(s.types.get(name), type, `${name} is a ${type}`)
  if (!labels) return
  const seen = labelsOf(s, type === 'histogram' ? `${name}_bucket` : name)
  const want = [...labels, 'process', ...(type === 'histogram' ? ['le'] : type === 'summary' ? ['quantile'] : [])].sort()
  t.ok(seen.length > 0 && seen.every(l => JSON.stringify(l) === JSON.stringify(want)), `${name} labels ${want.join(',')}`)
}

const targets = {
  'card-auth': fleet.lanes['card-auth']!.url,
  fraud: fleet.lanes.fraud!.url,
  tax: fleet.lanes.tax!.url,
  gateway: fleet.gateway.url,
  worker: worker.url,
  deck: deck.url,
  'tax-sandbox': fleet.sandbox.url,
}
const scrapes = Object.fromEntries(
  await Promise.all(Object.entries(targets).map(async ([k, u]) => [k, await scrape(u)] as const)))

t.test('every process serves valid Prometheus text with its process label', async t => {
  for (const [name, s] of Object.entries(scrapes)) {
    const r = await promtool(s.text)
    const findings = r.out.split('\n').filter(Boolean).filter(l => !PROM_CLIENT_DEFAULT_LINT.test(l))
    t.ok(r.code === 0 || (r.code === 3 && findings.length === 0), `${name}: promtool check metrics (${findings.join('; ') || 'clean'})`)
    t.ok(s.samples.length > 0 && s.samples.every(x => x.labels.process === name), `${name}: every series has process="${name}"`)
    expectMetric(t, s, 'process_resident_memory_bytes', 'gauge')
    expectMetric(t, s, 'nodejs_eventloop_lag_seconds', 'gauge')
    for (const c of ['idle_trim_collections_total', 'idle_trim_pause_seconds_total', 'idle_trim_freed_bytes_total']) expectMetric(t, s, c, 'counter', [])
  }
})

t.test('lanes: bulkhead gauges, one-hot state, rejections by reason, pool, latency', async t => {
  for (const lane of ['card-auth', 'fraud', 'tax'] as const) {
    const s = scrapes[lane]!
    for (const g of ['bulkhead_threads_active', 'bulkhead_threads_max', 'bulkhead_queue_depth', 'bulkhead_queue_capacity']) expectMetric(t, s, g, 'gauge', ['lane'])
    expectMetric(t, s, 'bulkhead_state', 'gauge', ['lane', 'state'])
    const states = s.samples.filter(x => x.name === 'bulkhead_state')
    t.same(states.map(x => x.labels.state).sort(), ['NORMAL', 'RECOVERING', 'SATURATED'], `${lane}: one series per state`)
    t.equal(states.reduce((a, x) => a + x.value, 0), 1, `${lane}: exactly one state is 1`)
    expectMetric(t, s, 'bulkhead_db_pool_connections', 'gauge', ['lane', 'state'])
    t.same(s.samples.filter(x => x.name === 'bulkhead_db_pool_connections').map(x => x.labels.state).sort(), ['idle', 'total', 'waiting'])
    expectMetric(t, s, 'bulkhead_rejection_total', 'counter')
    expectMetric(t, s, 'bulkhead_permit_wait_seconds', 'histogram', ['lane'])
    expectMetric(t, s, 'http_request_duration_seconds', 'histogram', ['lane', 'route', 'status_code'])
    expectMetric(t, s, 'bulkhead_request_latency_seconds', 'gauge')
    t.ok(s.samples.filter(x => x.name.startsWith('bulkhead_')).every(x => x.labels.lane === lane), `${lane}: lane label is the lane`)
  }
  const shed = scrapes.tax!.samples.find(x => x.name === 'bulkhead_rejection_total' && x.labels.reason === 'fail_fast')
  t.ok(shed && shed.value >= 1, `tax counted its shed requests as reason="fail_fast" (${shed?.value})`)
  t.same(Object.keys(shed!.labels).sort(), ['lane', 'process', 'reason'])
})

t.test('gateway: upstream in-flight per lane, retry storms by reason, and in the rejection counter', async t => {
  const s = scrapes.gateway!
  expectMetric(t, s, 'gateway_upstream_inflight', 'gauge', ['lane'])
  t.same(s.samples.filter(x => x.name === 'gateway_upstream_inflight').map(x => x.labels.lane).sort(), ['card-auth', 'fraud', 'tax'])
  expectMetric(t, s, 'gateway_retry_storm_blocked_total', 'counter', ['reason'])
  t.ok(s.samples.some(x => x.name === 'gateway_retry_storm_blocked_total' && x.labels.reason === 'retry_storm' && x.value >= 1), 'the 5th attempt counted')
  const r = s.samples.find(x => x.name === 'bulkhead_rejection_total' && x.labels.reason === 'retry_storm')
  t.match(r, { labels: { lane: 'card-auth', reason: 'retry_storm' } }, 'bulkhead_rejection_total{reason="retry_storm"} on the lane it protected')
  expectMetric(t, s, 'gateway_lane_unavailable_total', 'counter')
  expectMetric(t, s, 'http_request_duration_seconds', 'histogram', ['lane', 'route', 'status_code'])
})

t.test('worker: queue depth by status, MaxWorkers, oldest pending age, zombies rescued', async t => {
  const s = scrapes.worker!
  expectMetric(t, s, 'queue_jobs', 'gauge', ['queue', 'status'])
  t.same([...new Set(s.samples.filter(x => x.name === 'queue_jobs').map(x => x.labels.status))].sort(), ['dead', 'fetched', 'pending', 'processing'])
  expectMetric(t, s, 'queue_max_workers', 'gauge', ['queue'])
  t.same(Object.fromEntries(s.samples.filter(x => x.name === 'queue_max_workers').map(x => [x.labels.queue, x.value])), { 'fraud-async': 10, 'tax-reconcile': 3 }, 'MaxWorkers from the queue table')
  expectMetric(t, s, 'queue_oldest_pending_age_seconds', 'gauge', ['queue'])
  expectMetric(t, s, 'queue_zombies_rescued_total', 'counter')
  expectMetric(t, s, 'queue_job_duration_seconds', 'histogram', ['queue', 'type', 'outcome'])
})

t.test('deck: whether it reaches each process', async t => {
  expectMetric(t, scrapes.deck!, 'deck_target_up', 'gauge', ['target', 'kind'])
})
