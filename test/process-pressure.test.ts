// @fastify/under-pressure on the processes that are not lanes: the worker, the
// deck and the tax sandbox, each a real process with its heap limit set to 1
// byte by env (so it is always "under pressure"), shed their normal routes
// with 503 ERR_LANE_OVERLOADED, Retry-After and the RateLimit fields, while
// their liveness and metrics still answer and readiness says why it fails; the
// deck refuses a caller without its token with 401 all the same.
import t, { type Test } from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startDeck } from './helpers/deck.ts'
import { call, eventually, type Res } from './helpers/http.ts'
import { startProcess } from './helpers/procs.ts'
import { createQueue, startWorker } from './helpers/queue.ts'

const db = await testDatabase(t)
// A queue no lane owns, so the worker needs no lane role.
await createQueue(db, 'pressure-test', 1)
const worker = await startWorker(t, db, ['pressure-test'], { WORKER_PRESSURE_MAX_HEAP_BYTES: '1' })
const sandbox = await startProcess(t, 'tax-sandbox', 'services/tax-sandbox/main.ts', { TAX_SANDBOX_PORT: '0', TAX_SANDBOX_PRESSURE_MAX_HEAP_BYTES: '1' })
const deck = await startDeck(t, db, {}, { DECK_PRESSURE_MAX_HEAP_BYTES: '1' })

/** The first 503 of `req` (under-pressure samples the heap once a second). */
const shed = (req: () => Promise<Res>): Promise<Res | undefined> => eventually(async () => {
  const r = await req()
  return r.status === 503 ? r : undefined
}, 10_000, 100)

function checkShed (t: Test, r: Res | undefined, name: string): void {
  t.ok(r, 'shed with 503')
  if (!r) return
  t.equal(r.body.code, 'ERR_LANE_OVERLOADED')
  t.match(r.headers['content-type'], /^application\/problem\+json/)
  t.match(r.body.type, /temporary-reduced-capacity$/)
  t.equal(r.headers['retry-after'], '5', 'Retry-After')
  t.equal(r.headers['ratelimit-policy'], `"${name}-pressure";q=0;w=5`, 'RateLimit-Policy')
  t.equal(r.headers.ratelimit, `"${name}-pressure";r=0;t=5`, 'RateLimit')
  t.same(r.body['violated-policies'], [`${name}-pressure`], 'violated-policies')
}

async function checkOpsAnswer (t: Test, url: string): Promise<void> {
  t.equal((await call(url + '/health/live')).status, 200, '/health/live still answers')
  const ready = await call(url + '/health/ready')
  t.equal(ready.status, 503, 'not ready')
  t.equal(ready.body.underPressure, true, 'and says why')
  t.equal((await call(url + '/metrics')).status, 200, '/metrics still answers')
}

t.test('worker', async t => {
  checkShed(t, await shed(() => call(worker.url + '/status')), 'worker')
  await checkOpsAnswer(t, worker.url)
})

t.test('tax sandbox', async t => {
  checkShed(t, await shed(() => call(sandbox.url + '/v1/rates/quote', { json: { jurisdiction: 'DE', amount: { value: 100, currency: 'EUR' } } })), 'tax-sandbox')
  checkShed(t, await shed(() => call(sandbox.url + '/faults', { method: 'PUT', json: { latencyMs: 8000 } })), 'tax-sandbox')
  await checkOpsAnswer(t, sandbox.url)
})

t.test('deck', async t => {
  checkShed(t, await shed(() => deck.admin('GET', '/admin/lanes')), 'deck')
  checkShed(t, await shed(() => call(deck.url + '/')), 'deck')
  // The token is checked before the pressure: a caller without it, while the deck
  // sheds, is refused as it always is and learns nothing of the deck's state.
  const anonymous = await call(deck.url + '/admin/lanes')
  t.equal(anonymous.status, 401, 'without the token: 401 while the deck sheds, not 503')
  t.equal(anonymous.body.code, 'ERR_UNAUTHENTICATED')
  await checkOpsAnswer(t, deck.url)
})
