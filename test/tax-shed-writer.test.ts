// The tax lane's writer of compensated quotes given while saturated
// (services/tax/store-quote.ts): alone or in a batch, each quote is stored once
// with exactly one reconcile job, and a key already taken answers the earlier
// quote (a replay), whether it was taken before or earlier in the same batch;
// no enqueue key is kept for the jobs (jobs.enqueue_keys is never pruned).
// A batch of one goes as the single quote's statement, larger ones as the unnest
// form: both are exercised here.
import t from 'tap'
import { newId } from '../shared/ids.ts'
import { compensationWriter, type QuoteRecord } from '../services/tax/store-quote.ts'
import { testDatabase } from './helpers/db.ts'

const db = await testDatabase(t)
const writer = compensationWriter(db.laneUrl('tax'), { warn: () => {} })
t.teardown(() => writer.close())

const record = (key: string, value: number): QuoteRecord => {
  const id = newId()
  const tax = Math.round(value * 0.19)
  return {
    id,
    clientId: 'client-w',
    key,
    fingerprint: `fp-${key}-${value}`,
    jurisdiction: 'DE',
    amount: value,
    currency: 'EUR',
    rate: 0.19,
    tax,
    total: value + tax,
    source: 'compensation',
    tableVersion: 'v-test',
    reason: 'saturated',
    response: { id, rate: 0.19, tax: { value: tax, currency: 'EUR' }, total: { value: value + tax, currency: 'EUR' }, amount: { value, currency: 'EUR' }, source: 'compensation', tableVersion: 'v-test' },
  }
}
const rows = () => db.query<{ idempotency_key: string, id: string }>("select idempotency_key, id::text from tax.quotes where client_id = 'client-w' order by idempotency_key")
const jobs = () => db.query<{ quote: string }>("select payload->>'quoteId' as quote from jobs.jobs_hot where queue = 'tax-reconcile' order by 1")

t.test('alone: stored with its job; the same key again answers the first quote and queues nothing', async t => {
  const a = record('k-alone', 1_000)
  const first = await writer.submit(a)
  t.same(first, { fingerprint: a.fingerprint, response: a.response, inserted: true })
  const again = record('k-alone', 2_000)
  const second = await writer.submit(again)
  t.same(second, { fingerprint: a.fingerprint, response: a.response, inserted: false }, 'the earlier quote, its fingerprint included (a different body is told apart by it)')
  t.same(await rows(), [{ idempotency_key: 'k-alone', id: a.id }])
  t.same((await jobs()).map(j => j.quote), [a.id], 'one reconcile job, for the stored quote')
})

t.test('in one batch: new keys stored, a taken key and a key repeated in the batch answer the first quote', async t => {
  const fresh = record('k-batch-1', 3_000)
  const taken = record('k-alone', 4_000)
  const dupA = record('k-batch-2', 5_000)
  const dupB = record('k-batch-2', 6_000)
  // Submitted in one turn of the event loop: one batch.
  const out = await Promise.all([fresh, taken, dupA, dupB].map(r => writer.submit(r)))
  t.same(out.map(o => o.inserted), [true, false, true, false])
  t.equal((out[1]!.response as { id: string }).id, (await rows()).find(r => r.idempotency_key === 'k-alone')!.id, 'the taken key answers the quote stored before')
  t.same(out[3], { fingerprint: dupA.fingerprint, response: dupA.response, inserted: false }, 'the repeated key answers the first of the batch')
  const stored = await rows()
  t.same(stored.map(r => r.idempotency_key), ['k-alone', 'k-batch-1', 'k-batch-2'], 'one row per key')
  t.same((await jobs()).map(j => j.quote).sort(), stored.map(r => r.id).sort(), 'one reconcile job per stored quote, none for a replay')
  t.same(await db.query('select queue, idempotency_key from jobs.enqueue_keys'), [], 'and no enqueue key kept for any of them: the quote\'s own key makes its job unique')
})
