// A few hundred malformed or hostile requests at the gateway: bad JSON, huge
// headers, wrong types, raw card numbers in every field, missing fields and
// keys, bad credentials, storming retries. Each gets the right 4xx code as
// problem+json, none reaches a lane, and nothing is written to any lane table.
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startFleet } from './helpers/fleet.ts'
import { call } from './helpers/http.ts'

const db = await testDatabase(t)
const fleet = await startFleet(t, db)
const gw = fleet.gateway.url
const money = { value: 100, currency: 'EUR' }
const routes: Record<string, Record<string, unknown>> = {
  '/v1/authorizations': { merchantId: 'm_1', cardToken: 'tok_abcd', amount: money },
  '/v1/fraud/screenings': { cardToken: 'tok_abcd', merchantId: 'm_1', amount: money, ipCountry: 'DE', billingCountry: 'DE' },
  '/v1/tax/quotes': { jurisdiction: 'DE', amount: money },
}
const PANS = ['4111111111111111', '5555 5555 5555 4444', '3782-822463-10005', '6011000990139424', '4000056655665556', 'my card is 4242424242424242 ok']
const WRONG = [0, -1, 1.5, true, null, [], {}, 'x'.repeat(300), '', '<script>', { value: 1 }]
const BAD_JSON = ['{', '{"a":', '[1,2', 'nul', '{"amount": {"value": 1,}}', '\u0000', '{"a":"\\x"}', '{}}', '"string"', '{"a":1}{"b":2}']

interface Case {
  path: string, method?: string, headers?: Record<string, string>, body?: string, status: number, code: string
}
const cases: Case[] = []
let k = 0
const headers = (extra: Record<string, string> = {}) => ({ authorization: `Bearer ${fleet.apiKey}`, 'content-type': 'application/json', 'idempotency-key': `hostile-${++k}`, ...extra })
for (const [path, valid] of Object.entries(routes)) {
  for (const raw of BAD_JSON) cases.push({ path, headers: headers(), body: raw, status: 400, code: raw === '"string"' ? 'ERR_VALIDATION' : 'ERR_MALFORMED_JSON' })
  for (const field of Object.keys(valid)) {
    for (const w of WRONG) cases.push({ path, headers: headers(), body: JSON.stringify({ ...valid, [field]: w }), status: 400, code: 'ERR_VALIDATION' })
    for (const pan of PANS) cases.push({ path, headers: headers(), body: JSON.stringify({ ...valid, [field]: pan }), status: 422, code: 'ERR_PAN_NOT_ACCEPTED' })
    const { [field]: _gone, ...missing } = valid
    if (!['ipCountry', 'billingCountry'].includes(field)) cases.push({ path, headers: headers(), body: JSON.stringify(missing), status: 400, code: 'ERR_VALIDATION' })
  }
  for (const pan of PANS) cases.push({ path, headers: headers(), body: JSON.stringify({ ...valid, comment: pan }), status: 422, code: 'ERR_PAN_NOT_ACCEPTED' })
  cases.push({ path, headers: headers(), body: JSON.stringify({ ...valid, amount: { value: 1, currency: 'EUR', cents: 5 } }), status: 400, code: 'ERR_VALIDATION' })
  cases.push({ path, headers: headers(), body: JSON.stringify({ ...valid, amount: { value: 1, currency: 'eur' } }), status: 400, code: 'ERR_VALIDATION' })
  cases.push({ path, headers: headers({ 'x-huge': 'a'.repeat(20_000) }), body: JSON.stringify(valid), status: 431, code: 'ERR_HEADERS_TOO_LARGE' })
  cases.push({ path, headers: headers(), body: JSON.stringify({ ...valid, pad: 'p'.repeat(40_000) }), status: 413, code: 'ERR_PAYLOAD_TOO_LARGE' })
  cases.push({ path, headers: headers({ 'content-type': 'application/x-www-form-urlencoded' }), body: 'a=1', status: 415, code: 'ERR_UNSUPPORTED_MEDIA_TYPE' })
  cases.push({ path, headers: headers({ 'content-type': 'text/plain' }), body: JSON.stringify(valid), status: 415, code: 'ERR_UNSUPPORTED_MEDIA_TYPE' })
  for (const key of ['', ' ', 'k'.repeat(256), 'two words']) cases.push({ path, headers: headers({ 'idempotency-key': key }), body: JSON.stringify(valid), status: 400, code: 'ERR_IDEMPOTENCY_KEY_REQUIRED' })
  for (const auth of ['', 'Bearer', 'Bearer ', `Basic ${Buffer.from('a:b').toString('base64')}`, 'Bearer wt_0000000000000000000000000000000000000000000', `bearer ${fleet.apiKey}x`]) {
    cases.push({ path, headers: headers({ authorization: auth }), body: JSON.stringify(valid), status: 401, code: 'ERR_UNAUTHENTICATED' })
  }
  // Storming retries of one (invalid) request: 4 attempts reach validation, the rest are blocked.
  const stormHeaders = headers()
  for (let i = 0; i < 8; i++) cases.push({ path, headers: stormHeaders, body: JSON.stringify({ ...valid, nope: true }), status: i < 4 ? 400 : 429, code: i < 4 ? 'ERR_VALIDATION' : 'ERR_RETRY_STORM_BLOCKED' })
  for (const id of ['1', 'zzzz', '00000000-0000-0000-0000-00000000000g', '%00', '..%2F..%2Fetc']) {
    cases.push({ path: `${path}/${id}`, method: 'GET', headers: { authorization: `Bearer ${fleet.apiKey}` }, status: 400, code: 'ERR_VALIDATION' })
  }
}
for (const [m, p] of [['DELETE', '/v1/authorizations'], ['PUT', '/v1/tax/quotes'], ['GET', '/admin/lanes'], ['POST', '/v1/refunds'], ['GET', '/../../etc/passwd']]) {
  cases.push({ path: p!, method: m!, headers: { authorization: `Bearer ${fleet.apiKey}` }, status: 404, code: 'ERR_NOT_FOUND' })
}

const laneDataRequests = async (): Promise<number> => {
  let n = 0
  for (const lane of Object.values(fleet.lanes)) {
    const text = (await call(lane!.url + '/metrics')).body as string
    for (const m of text.matchAll(/^http_request_duration_seconds_count\{[^}]*route="\/v1[^}]*\} (\d+)/gm)) n += Number(m[1])
  }
  return n
}

t.test(`${cases.length} hostile requests each get the right 4xx problem`, async t => {
  t.ok(cases.length >= 300, `${cases.length} cases`)
  const failures: string[] = []
  for (const c of cases) {
    const r = await call(gw + c.path, { method: c.method ?? 'POST', headers: c.headers, ...(c.body !== undefined ? { raw: c.body } : {}) }).catch(e => ({ status: 0, headers: {} as Record<string, string>, body: { code: String(e) }, ms: 0 }))
    const ok = r.status === c.status && r.body?.code === c.code && /^application\/problem\+json/.test(r.headers['content-type'] ?? '') &&
      typeof r.body?.type === 'string' && typeof r.body?.instance === 'string' && !JSON.stringify(r.body).includes('    at ')
    if (!ok) failures.push(`${c.method ?? 'POST'} ${c.path} ${(c.body ?? '').slice(0, 60)} → ${r.status} ${r.body?.code} (want ${c.status} ${c.code})`)
    if ([429, 503].includes(r.status) && !r.headers['retry-after']) failures.push(`${c.path}: ${r.status} without Retry-After`)
  }
  t.same(failures, [], 'every case answered as expected')
})

t.test('none of them reached a lane, and nothing was written', async t => {
  t.equal(await laneDataRequests(), 0, 'no lane served a data-plane request')
  for (const table of ['card_auth.authorizations', 'card_auth.holds', 'fraud.screenings', 'tax.quotes']) t.equal((await db.query(`select 1 from ${table}`)).length, 0, table)
  for (const p of [fleet.gateway, ...Object.values(fleet.lanes)]) {
    for (const pan of ['4111111111111111', '5555 5555 5555 4444', '4242424242424242']) t.notOk(p!.log.some(l => l.includes(pan)), `${p!.name} never logged ${pan}`)
  }
})

t.test('the OpenAPI document describes every data-plane route with its schemas', async t => {
  const doc = (await call(gw + '/openapi.json')).body
  t.equal(doc.openapi?.slice(0, 2), '3.')
  for (const [p, m, status] of [['/v1/authorizations', 'post', '201'], ['/v1/authorizations/{id}', 'get', '200'], ['/v1/fraud/screenings', 'post', '200'], ['/v1/fraud/screenings/{id}', 'get', '200'], ['/v1/tax/quotes', 'post', '200'], ['/v1/tax/quotes/{id}', 'get', '200']]) {
    const op = doc.paths?.[p!]?.[m!]
    t.ok(op, `${m} ${p}`)
    t.ok(op?.responses?.[status!], `${m} ${p} documents ${status}`)
    t.ok(op?.responses?.['4XX'] ?? op?.responses?.['4xx'], `${m} ${p} documents problem responses`)
    if (m === 'post') t.equal(op?.requestBody?.content?.['application/json']?.schema?.additionalProperties, false, `${p} body refuses unknown fields`)
  }
  t.notOk(doc.paths?.['/metrics'], 'ops routes are not in the public document')
})
