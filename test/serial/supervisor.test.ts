// `npm start`'s supervisor, for real: it migrates, seeds, starts every process
// as its own child, writes credentials.json (0600), restarts a child killed
// with -9, and on SIGTERM stops everything, leaving no process behind.
// (DATABASE_URL points it at the test's database instead of a second embedded server.)
// Two gateways (GATEWAY_REPLICAS=2) sharing the retry limits in the test's own
// Redis; without REDIS_URL the supervisor refuses two, in one line, at once.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import t from 'tap'
import { testDatabase } from '../helpers/db.ts'
import { call, eventually } from '../helpers/http.ts'
import { fleetPorts, ROOT, running, TS_LOADER } from '../helpers/procs.ts'
import { DIST_DIR } from '../setup/state.ts'
import { startRedis } from '../helpers/redis.ts'

const db = await testDatabase(t)
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-sup-'))
t.teardown(() => fs.rmSync(dataDir, { recursive: true, force: true }))
const { ports, env: portEnv } = await fleetPorts()
const redis = await startRedis(t)
const supEnv = { ...process.env, ...db.env, DATABASE_URL: db.superUrl, DATA_DIR: dataDir, FLEET_DIST: DIST_DIR, FLEET_PREBUILT: 'true', FLEET_NODE_ARGS_TAX: '--max-old-space-size=200', ...portEnv }
const sup = spawn(process.execPath, ['--expose-gc', ...TS_LOADER, 'services/supervisor/main.ts'], {
  cwd: ROOT,
  env: { ...supEnv, GATEWAY_REPLICAS: '2', REDIS_URL: redis.url },
  stdio: ['ignore', 'pipe', 'pipe'],
})
const lines: string[] = []
readline.createInterface({ input: sup.stdout! }).on('line', l => lines.push(l))
readline.createInterface({ input: sup.stderr! }).on('line', l => lines.push(l))
t.teardown(() => { if (sup.exitCode === null) sup.kill('SIGKILL') })

t.test('two gateways without REDIS_URL: refused in one line, nothing started', async t => {
  const refused = spawn(process.execPath, ['--expose-gc', ...TS_LOADER, 'services/supervisor/main.ts'], { cwd: ROOT, env: { ...supEnv, GATEWAY_REPLICAS: '2', REDIS_URL: '' }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.teardown(() => { if (refused.exitCode === null) refused.kill('SIGKILL') })
  let out = ''
  refused.stdout!.on('data', (b: Buffer) => { out += String(b) })
  refused.stderr!.on('data', (b: Buffer) => { out += String(b) })
  const code = await new Promise<number | null>(resolve => refused.once('close', c => resolve(c)))
  t.equal(code, 1, 'exit code 1')
  const said = out.trim().split('\n')
  t.equal(said.length, 1, `one line: ${out.trim()}`)
  t.match(said[0], /ERR_CONFIG_INVALID: GATEWAY_REPLICAS=2 needs REDIS_URL: .* set REDIS_URL=redis:\/\/host:port/, 'which says what to set')
  t.notMatch(out, /compiling|database|^\s+at /m, 'before compiling or touching the database, and no stack trace')
})

t.test('the fleet comes up with credentials, survives a killed lane, and stops cleanly', async t => {
  const up = await eventually(async () => lines.find(l => l.includes('fleet is up')), 60_000, 100)
  t.ok(up, `fleet is up\n${up ? '' : lines.filter(l => !l.startsWith('{')).slice(-30).join('\n')}`)
  const pids = Object.fromEntries([...up!.matchAll(/([a-z][a-z0-9-]*)=(\d+)/g)].map(m => [m[1]!, Number(m[2])]))
  t.same(Object.keys(pids).sort(), ['card-auth', 'deck', 'fraud', 'gateway', 'gateway-2', 'tax', 'tax-sandbox', 'worker-fraud', 'worker-tax'])
  // FLEET_NODE_ARGS_TAX reaches the tax lane's node, and no other child's.
  const withArg = Object.entries(pids).filter(([, pid]) => fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes('--max-old-space-size=200')).map(([n]) => n)
  t.same(withArg, ['tax'], 'per-child node flags go to that child only')
  // CPU priority by lane priority: when the fleet shares cores, P2 work yields to the P0 path.
  const nice = Object.fromEntries(Object.entries(pids).map(([n, pid]) => [n, os.getPriority(pid)]))
  t.same(nice, { 'tax-sandbox': 10, 'card-auth': 0, fraud: 5, tax: 10, 'worker-fraud': 5, 'worker-tax': 10, gateway: 0, 'gateway-2': 0, deck: 5 }, 'CPU priorities: P0 0, P1 5, P2 10, deck 5, sandbox 10')
  // Under scheduler autogroups each child (its own session) is weighed by its group's nice.
  if (fs.existsSync(`/proc/${pids.tax}/autogroup`)) {
    const group = Object.fromEntries(Object.entries(pids).map(([n, pid]) => [n, Number(/nice (-?\d+)/.exec(fs.readFileSync(`/proc/${pid}/autogroup`, 'utf8'))?.[1])]))
    t.same(group, nice, 'and each child\'s autogroup has the same nice')
  }
  t.ok(lines.some(l => l.includes('curl -s -X POST')), 'prints an example curl')

  const credsFile = path.join(dataDir, 'credentials.json')
  t.equal(fs.statSync(credsFile).mode & 0o777, 0o600, 'credentials.json is 0600')
  const creds = JSON.parse(fs.readFileSync(credsFile, 'utf8'))
  t.match(creds, { gatewayUrl: `http://127.0.0.1:${ports.GATEWAY_PORT}`, deckUrl: String, apiKey: /^wt_/, adminToken: String, databaseUrl: String })
  t.ok(creds.demoCards.length >= 2, 'demo cards')
  const card = creds.demoCards[0]
  const authorize = (key: string) => call(creds.gatewayUrl + '/v1/authorizations', { json: { merchantId: 'm_sup', cardToken: card.token, amount: { value: 100, currency: card.currency } }, headers: { authorization: `Bearer ${creds.apiKey}`, 'idempotency-key': key } })
  t.equal((await authorize('sup-1')).status, 201, 'an authorization through the gateway')
  t.same(creds.gatewayUrls, [creds.gatewayUrl, `http://127.0.0.1:${ports.GATEWAY_PORT + 1}`], 'both gateways in credentials.json')
  t.ok(lines.some(l => l.includes(`http://127.0.0.1:${ports.GATEWAY_PORT + 1}`) && l.includes('sharing retry limits')), 'and printed')
  // The retry limit is the two gateways': 4 attempts of a key across both, the 5th refused.
  // Each gateway's warm-up may have found the store over budget; its breaker probes each second.
  const storeUp = async (url: string): Promise<boolean> => /^gateway_retry_guard_store_up(?:\{[^}]*\})? 1$/m.test(String((await call(url + '/metrics')).body))
  t.ok(await eventually(async () => (await storeUp(creds.gatewayUrls[0]) && await storeUp(creds.gatewayUrls[1])) || undefined, 20_000, 200), 'both gateways decide in Redis')
  const at = (url: string, key: string) => call(url + '/v1/authorizations', { json: { merchantId: 'm_sup', cardToken: card.token, amount: { value: 100, currency: card.currency } }, headers: { authorization: `Bearer ${creds.apiKey}`, 'idempotency-key': key } })
  const four = []
  for (let i = 0; i < 4; i++) four.push((await at(creds.gatewayUrls[i % 2], 'sup-shared')).status)
  t.same(four, [201, 201, 201, 201], 'four attempts of one key across both gateways')
  t.equal((await at(creds.gatewayUrls[0], 'sup-shared')).body?.code, 'ERR_RETRY_STORM_BLOCKED', 'the fifth refused: the limit is shared')
  t.equal((await call(creds.deckUrl + '/admin/lanes')).status, 401, 'the deck is up and wants the token')
  const lanes = await eventually(async () => {
    const r = await call(creds.deckUrl + '/admin/lanes', { headers: { authorization: `Bearer ${creds.adminToken}` } })
    const up = (x: { up: boolean }) => x.up
    return r.body.lanes?.every(up) && r.body.processes?.every(up) ? r.body : undefined
  }, 10_000, 200)
  t.ok(lanes, 'with the printed token, the deck sees every lane and process up')

  process.kill(pids['card-auth']!, 'SIGKILL')
  // A fresh key per try: retrying one key faster than its Retry-After is refused at the gateway.
  let tries = 0
  const again = await eventually(async () => { const r = await authorize(`sup-2-${++tries}`); return r.status === 201 ? r : undefined }, 20_000, 200)
  t.ok(again, `card-auth is back after kill -9${again ? '' : `\n${lines.filter(l => l.startsWith('[') || l.includes('"card-auth"')).slice(-20).join('\n')}`}`)
  t.ok(lines.some(l => /card-auth exited \(SIGKILL\); restart #1/.test(l)), 'the supervisor logged the restart')

  const children = Object.values(pids)
  const exited = new Promise<number | null>(resolve => sup.once('exit', code => resolve(code)))
  sup.kill('SIGTERM')
  t.equal(await exited, 0, 'supervisor exits 0')
  const restartedPid = Number(/"pid":(\d+)[^\n]*Server listening/.exec(lines.filter(l => l.includes('"name":"card-auth"')).slice(-1)[0] ?? '')?.[1] ?? 0)
  for (const pid of [...children, restartedPid].filter(Boolean)) t.notOk(running(pid), `process ${pid} is gone`)
  t.ok(lines.some(l => l.includes('draining the gateway, then the lanes')), 'ordered shutdown')
})
