// A client that goes away while its request is in a lane: the gateway closes its
// request to the lane, and the lane stops the work there (its permit back,
// nothing written) instead of running it to its end for nobody. The tax lane
// shows which happened: a quote whose provider misses the quote deadline is
// answered from the certified table and stored, so a quote left to run leaves a
// row, and one stopped by the disconnect leaves none.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { certify } from '../services/tax/compensation/certify.ts'
import { DEFAULT_TABLE_FILE } from '../services/tax/compensation/table.ts'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call, eventually } from './helpers/http.ts'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-disconnect-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const certFile = path.join(dir, 'certificate.json')
// Not a test of shedding: a loaded machine must not turn the quote into a 503.
const env = { TAX_CERTIFICATE_FILE: certFile, TAX_QUOTE_DEADLINE_MS: '3000', TAX_PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0', TAX_PRESSURE_MAX_EVENT_LOOP_UTILIZATION: '0' }
const db = await testDatabase(t, env)
const fleet = await startFleet(t, db, { lanes: ['tax'], env })
const certificate = await certify({ tableFile: DEFAULT_TABLE_FILE, providerUrl: fleet.sandbox.url })
fs.writeFileSync(certFile, JSON.stringify(certificate))
await eventually(async () => (await call(fleet.lanes.tax!.url + '/compensation')).body.certified === true, 8_000, 100)
const active = async (): Promise<number> => (await fleet.status('tax')).active
const rows = async (key: string): Promise<number> => (await db.query('select 1 from tax.quotes where idempotency_key = $1', [key])).length
const quote = { jurisdiction: 'DE', amount: { value: 10_000, currency: 'EUR' } }

t.test('a client gone while its quote waits on a hung provider: the lane stops it, nothing is stored', async t => {
  await fleet.setFaults({ latencyMs: 60_000 })

  const ac = new AbortController()
  const gone = call(fleet.gateway.url + '/v1/tax/quotes', { json: quote, headers: { authorization: `Bearer ${fleet.apiKey}`, 'idempotency-key': 'gone-1' }, signal: ac.signal })
    .then(() => 'answered', () => 'aborted')
  t.ok(await eventually(async () => (await active()) === 1), 'the quote holds a permit, waiting on the provider')
  ac.abort()
  t.equal(await gone, 'aborted', 'the client went away before any answer')
  t.ok(await eventually(async () => (await active()) === 0, 20_000), 'its permit comes back')
  t.equal(await rows('gone-1'), 0, 'stopped before the quote deadline: no compensated quote was stored for it')

  // The same quote with its client still there runs to the quote deadline and is stored.
  const stayed = await fleet.post('/v1/tax/quotes', quote, 'stayed-1')
  t.equal(stayed.status, 200)
  t.equal(stayed.headers['x-tax-compensation'], 'provider_deadline', 'answered from the certified table at the quote deadline', { answer: stayed.body })
  t.equal(await rows('stayed-1'), 1, 'and stored')
})
