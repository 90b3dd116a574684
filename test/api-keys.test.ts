// API keys: created and revoked with `npm run keys`, stored only as SHA-256,
// picked up by a running gateway without a restart; a key file the gateway
// cannot read leaves it up and unready, saying why, until the file is fixed.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { createKey } from '../shared/api-keys.ts'
import { testDatabase } from './helpers/db.ts'
import { untilServing } from './helpers/gateway.ts'
import { call, eventually } from './helpers/http.ts'
import { ROOT, startProcess, TS_LOADER } from './helpers/procs.ts'

const run = promisify(execFile)
const db = await testDatabase(t)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-keys-'))
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
const file = path.join(dir, 'api-keys.json')
const keys = (...args: string[]) => run(process.execPath, [...TS_LOADER, 'gateway/keys-cli.ts', ...args], { cwd: ROOT, env: { ...process.env, API_KEYS_FILE: file } })

t.test('create, use, list and revoke a key', async t => {
  const { stdout } = await keys('create', 'shop-eu')
  const key = stdout.trim()
  t.match(key, /^wt_[A-Za-z0-9_-]{43}$/)
  t.notOk(fs.readFileSync(file, 'utf8').includes(key), 'the key itself is not stored')
  t.equal(fs.statSync(file).mode & 0o777, 0o644, 'key file is 0644: only hashes, readable by a container\'s user')
  const gw = await startProcess(t, 'gateway', 'gateway/main.ts', { ...db.env, GATEWAY_PORT: '0', GATEWAY_HOST: '127.0.0.1', API_KEYS_FILE: file, CARD_AUTH_URL: 'http://127.0.0.1:9', FRAUD_URL: 'http://127.0.0.1:9', TAX_URL: 'http://127.0.0.1:9' })
  await untilServing(gw.url)
  const probe = () => call(gw.url + '/v1/tax/quotes/00000000-0000-4000-8000-000000000000', { headers: { authorization: `Bearer ${key}` } })
  t.equal((await probe()).body.code, 'ERR_LANE_UNAVAILABLE', 'authenticated (the lane is simply not running)')
  t.match((await keys('list')).stdout, /shop-eu\t[0-9a-f]{12}…\tcreated .*\tlive/)
  t.match((await keys('revoke', 'shop-eu')).stdout, /revoked 1 key/)
  t.ok(await eventually(async () => (await probe()).status === 401, 6_000, 200), 'a revoked key is refused without a gateway restart')
  const second = (await keys('create', 'shop-us')).stdout.trim()
  const probe2 = () => call(gw.url + '/v1/tax/quotes/00000000-0000-4000-8000-000000000000', { headers: { authorization: `Bearer ${second}` } })
  t.ok(await eventually(async () => (await probe2()).status === 503, 6_000, 200), 'a key created while the gateway runs is taken without a restart')
  await t.rejects(keys('revoke', 'nobody'), 'revoking an unknown client fails')
  await t.rejects(keys('create', 'bad id!'), 'a bad client id is refused')
})

t.test('a key file the gateway cannot read: up, unready with the reason, logged once, fixed by fixing the file', async t => {
  const bad = path.join(dir, 'broken-keys.json')
  fs.writeFileSync(bad, '{ not json')
  const gw = await startProcess(t, 'gateway', 'gateway/main.ts', { ...db.env, GATEWAY_PORT: '0', GATEWAY_HOST: '127.0.0.1', API_KEYS_FILE: bad, CARD_AUTH_URL: 'http://127.0.0.1:9', FRAUD_URL: 'http://127.0.0.1:9', TAX_URL: 'http://127.0.0.1:9' })
  const ready = await call(gw.url + '/health/ready')
  t.equal(ready.status, 503, 'not ready')
  t.match(ready.body, { status: 'unready', reason: /API_KEYS_FILE .*broken-keys\.json cannot be read/ }, 'says which file and why')
  t.equal((await call(gw.url + '/health/live')).status, 200, 'alive: no crash, no restart loop')
  const key = createKey(bad + '.new', 'shop-fix')
  fs.renameSync(bad + '.new', bad)
  t.ok(await eventually(async () => (await call(gw.url + '/health/ready')).status === 200, 6_000, 200), 'ready once the file is good')
  const r = await call(gw.url + '/v1/tax/quotes/00000000-0000-4000-8000-000000000000', { headers: { authorization: `Bearer ${key}` } })
  t.equal(r.body.code, 'ERR_LANE_UNAVAILABLE', 'and its key authenticates')
  const lines = gw.log.filter(l => l.includes('broken-keys.json cannot be read'))
  t.equal(lines.length, 1, 'the problem is logged once, not on every check')
  t.notOk(gw.log.some(l => /^\s+at /.test(l)), 'no stack trace')
})
