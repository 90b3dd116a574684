// The gateway reads a lane's answer whole before it answers, so it bounds it:
// an answer over LANE_ANSWER_MAX_BYTES (declared, or streamed without a length)
// is 502 ERR_LANE_ANSWER_TOO_LARGE as problem+json, never a partial answer, and
// the lane is not taken for down. The "lane" here is a hostile HTTP server on
// loopback standing where a lane would be; an answer under the bound passes
// through as the lane gave it.
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { createKey } from '../shared/api-keys.ts'
import { LANE_ANSWER_MAX_BYTES } from '../gateway/upstreams.ts'
import { untilServing } from './helpers/gateway.ts'
import { call } from './helpers/http.ts'
import { startProcess } from './helpers/procs.ts'

const big = JSON.stringify({ pad: 'x'.repeat(LANE_ANSWER_MAX_BYTES) })
const small = JSON.stringify({ id: '00000000-0000-4000-8000-000000000000', status: 'approved' })
const hostile = http.createServer((req, res) => {
  if (req.url!.startsWith('/v1/authorizations/')) { // declared length over the bound
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(big) }).end(big)
  } else if (req.url!.startsWith('/v1/tax/quotes/')) { // no length: chunks past the bound
    res.writeHead(200, { 'content-type': 'application/json' })
    for (let i = 0; i < big.length; i += 64 * 1024) res.write(big.slice(i, i + 64 * 1024))
    res.end()
  } else {
    res.writeHead(200, { 'content-type': 'application/json', 'x-lane': 'hostile' }).end(small)
  }
})
await new Promise<void>(resolve => hostile.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>(resolve => { hostile.closeAllConnections(); hostile.close(() => resolve()) }))
const lane = `http://127.0.0.1:${(hostile.address() as { port: number }).port}`

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-keys-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const keysFile = path.join(dir, 'api-keys.json')
const apiKey = createKey(keysFile, 'test-client')
const gw = await startProcess(t, 'gateway', 'gateway/main.ts', {
  GATEWAY_PORT: '0', GATEWAY_HOST: '127.0.0.1', API_KEYS_FILE: keysFile, CARD_AUTH_URL: lane, FRAUD_URL: lane, TAX_URL: lane,
})
const get = (p: string) => call(gw.url + p, { headers: { authorization: `Bearer ${apiKey}` } })
const id = '00000000-0000-4000-8000-000000000000'

await untilServing(gw.url)

t.test('an answer over the bound is 502 ERR_LANE_ANSWER_TOO_LARGE, whole and as problem+json', async t => {
  for (const p of [`/v1/authorizations/${id}`, `/v1/tax/quotes/${id}`]) {
    const r = await get(p)
    t.equal(r.status, 502, `${p}: 502 (got ${r.status} ${r.body?.code})`)
    t.equal(r.body.code, 'ERR_LANE_ANSWER_TOO_LARGE')
    t.match(r.headers['content-type'], /problem\+json/)
  }
})

t.test('an answer under the bound passes through, and the lane is still taken for up', async t => {
  const r = await get(`/v1/fraud/screenings/${id}`)
  t.equal(r.status, 200)
  t.same(r.body, JSON.parse(small), 'the lane\'s body as it gave it')
  t.equal(r.headers['x-lane'], 'hostile', 'with its headers')
  const again = await get(`/v1/authorizations/${id}`)
  t.equal(again.body.code, 'ERR_LANE_ANSWER_TOO_LARGE', 'an over-large answer is not a lane down (ERR_LANE_UNAVAILABLE)')
})
