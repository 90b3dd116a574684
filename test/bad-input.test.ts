// Bad input to every route, through the gateway: problem+json 4xx with a code,
// and nothing written to any lane's tables.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call } from './helpers/http.ts'

const db = await testDatabase(t)
const fleet = await startFleet(t, db)
const gw = fleet.gateway.url
const auth = { authorization: `Bearer ${fleet.apiKey}` }
const json = { ...auth, 'content-type': 'application/json', 'idempotency-key': 'bad-1' }

const money = { value: 100, currency: 'EUR' }
const valid: Record<string, unknown> = {
  '/v1/authorizations': { merchantId: 'm_1', cardToken: 'tok_abcd', amount: money },
  '/v1/fraud/screenings': { cardToken: 'tok_abcd', merchantId: 'm_1', amount: money },
  '/v1/tax/quotes': { jurisdiction: 'DE', amount: money },
}

interface Case {
  name: string
  method?: string
  path: string
  headers?: Record<string, string>
  raw?: string
  json?: unknown
  status: number
  code: string
}
const cases: Case[] = []
for (const [path, body] of Object.entries(valid)) {
  const b = body as Record<string, unknown>
  cases.push(
    { name: 'no credentials', path, headers: { 'content-type': 'application/json', 'idempotency-key': 'x' }, json: b, status: 401, code: 'ERR_UNAUTHENTICATED' },
    { name: 'wrong key', path, headers: { ...json, authorization: 'Bearer wt_notakeynotakeynotakey' }, json: b, status: 401, code: 'ERR_UNAUTHENTICATED' },
    { name: 'no Idempotency-Key', path, headers: { ...auth, 'content-type': 'application/json' }, json: b, status: 400, code: 'ERR_IDEMPOTENCY_KEY_REQUIRED' },
    { name: 'malformed JSON', path, headers: json, raw: '{"amount": ', status: 400, code: 'ERR_MALFORMED_JSON' },
    { name: 'empty body', path, headers: json, raw: '', status: 400, code: 'ERR_MALFORMED_JSON' },
    { name: 'wrong content type', path, headers: { ...json, 'content-type': 'text/plain' }, raw: JSON.stringify(b), status: 415, code: 'ERR_UNSUPPORTED_MEDIA_TYPE' },
    { name: 'oversize body', path, headers: json, raw: JSON.stringify({ ...b, pad: 'x'.repeat(20_000) }), status: 413, code: 'ERR_PAYLOAD_TOO_LARGE' },
    { name: 'unknown field', path, headers: json, json: { ...b, extra: 1 }, status: 400, code: 'ERR_VALIDATION' },
    { name: 'amount as string', path, headers: json, json: { ...b, amount: { value: '100', currency: 'EUR' } }, status: 400, code: 'ERR_VALIDATION' },
    { name: 'negative amount', path, headers: json, json: { ...b, amount: { value: -1, currency: 'EUR' } }, status: 400, code: 'ERR_VALIDATION' },
    { name: 'fractional amount', path, headers: json, json: { ...b, amount: { value: 1.5, currency: 'EUR' } }, status: 400, code: 'ERR_VALIDATION' },
    { name: 'huge amount', path, headers: json, json: { ...b, amount: { value: 1e15, currency: 'EUR' } }, status: 400, code: 'ERR_VALIDATION' },
    { name: 'unknown currency', path, headers: json, json: { ...b, amount: { value: 1, currency: 'XXY' } }, status: 400, code: 'ERR_VALIDATION' },
    { name: 'array body', path, headers: json, json: [b], status: 400, code: 'ERR_VALIDATION' },
    { name: 'missing field', path, headers: json, json: { amount: money }, status: 400, code: 'ERR_VALIDATION' }
  )
}
cases.push(
  { name: 'raw card number as token', path: '/v1/authorizations', headers: json, json: { merchantId: 'm_1', cardToken: '4111111111111111', amount: money }, status: 422, code: 'ERR_PAN_NOT_ACCEPTED' },
  { name: 'PAN with spaces in merchantId', path: '/v1/authorizations', headers: json, json: { merchantId: 'x 5555 5555 5555 4444', cardToken: 'tok_abcd', amount: money }, status: 422, code: 'ERR_PAN_NOT_ACCEPTED' },
  { name: 'PAN in an unknown field', path: '/v1/fraud/screenings', headers: json, json: { ...valid['/v1/fraud/screenings'] as object, note: '378282246310005' }, status: 422, code: 'ERR_PAN_NOT_ACCEPTED' },
  { name: 'bad jurisdiction', path: '/v1/tax/quotes', headers: json, json: { jurisdiction: 'Germany', amount: money }, status: 400, code: 'ERR_VALIDATION' },
  { name: 'bad country', path: '/v1/fraud/screenings', headers: json, json: { ...valid['/v1/fraud/screenings'] as object, ipCountry: 'de' }, status: 400, code: 'ERR_VALIDATION' },
  { name: 'bad id', method: 'GET', path: '/v1/authorizations/not-a-uuid', headers: auth, status: 400, code: 'ERR_VALIDATION' },
  { name: 'bad id (fraud)', method: 'GET', path: '/v1/fraud/screenings/1', headers: auth, status: 400, code: 'ERR_VALIDATION' },
  { name: 'unknown id', method: 'GET', path: '/v1/tax/quotes/00000000-0000-4000-8000-000000000000', headers: auth, status: 404, code: 'ERR_NOT_FOUND' },
  { name: 'unknown route', method: 'GET', path: '/v1/refunds', headers: auth, status: 404, code: 'ERR_NOT_FOUND' },
  { name: 'unknown tax jurisdiction (provider says so)', path: '/v1/tax/quotes', headers: { ...json, 'idempotency-key': 'bad-j' }, json: { jurisdiction: 'US-ZZ', amount: money }, status: 422, code: 'ERR_UNKNOWN_JURISDICTION' }
)

t.test('every bad request gets a problem+json 4xx with its code', async t => {
  let i = 0
  for (const c of cases) {
    // A distinct Idempotency-Key per case: reusing one would (rightly) trip the retry-storm guard.
    const headers = c.headers?.['idempotency-key'] === 'bad-1' ? { ...c.headers, 'idempotency-key': `bad-${++i}` } : c.headers
    const r = await call(gw + c.path, { method: c.method ?? 'POST', headers, ...(c.raw !== undefined ? { raw: c.raw } : {}), ...(c.json !== undefined ? { json: c.json } : {}) })
    t.equal(r.status, c.status, `${c.path} ${c.name}: status`)
    t.equal(r.body?.code, c.code, `${c.path} ${c.name}: code`)
    t.match(r.headers['content-type'], /^application\/problem\+json/, `${c.path} ${c.name}: problem+json`)
    t.match(r.body, { type: String, title: String, status: c.status, detail: String, instance: String }, `${c.path} ${c.name}: RFC 9457 members`)
    t.notOk(JSON.stringify(r.body).includes('    at '), 'no stack trace')
  }
})

t.test('a refused card number appears in no log line of any process', async t => {
  for (const p of [fleet.gateway, ...Object.values(fleet.lanes)]) {
    for (const pan of ['4111111111111111', '5555 5555 5555 4444', '378282246310005']) t.notOk(p!.log.some(l => l.includes(pan)), `${p!.name} log has no ${pan}`)
  }
})

t.test('nothing was written to any lane table', async t => {
  for (const table of ['card_auth.authorizations', 'card_auth.holds', 'fraud.screenings', 'tax.quotes']) {
    t.equal((await db.query(`select 1 from ${table}`)).length, 0, table)
  }
})

t.test('lanes validate too (defence in depth), and refuse a request without a client identity', async t => {
  const lane = fleet.lanes['card-auth']!.url
  const noClient = await call(lane + '/v1/authorizations', { json: valid['/v1/authorizations'], headers: { 'idempotency-key': 'k' } })
  t.equal(noClient.status, 401)
  const bad = await call(lane + '/v1/authorizations', { json: { nope: 1 }, headers: { 'idempotency-key': 'k', 'x-client-id': 'c1' } })
  t.equal(bad.body.code, 'ERR_VALIDATION')
  const noKey = await call(lane + '/v1/authorizations', { json: valid['/v1/authorizations'], headers: { 'x-client-id': 'c1' } })
  t.equal(noKey.body.code, 'ERR_IDEMPOTENCY_KEY_REQUIRED')
})
