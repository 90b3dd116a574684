// The deck's admin API against real processes: a card-auth lane, a lane that
// answers, then hangs (a socket that accepts and never answers), a lane that is not running,
// the tax sandbox, and PostgreSQL through the deck's own role.
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import t from 'tap'
import { laneLimits } from '../shared/lanes.ts'
import { testDatabase } from './helpers/db.ts'
import { startDeck } from './helpers/deck.ts'
import { call, eventually } from './helpers/http.ts'
import { ROOT, laneEnv, startProcess } from './helpers/procs.ts'

const db = await testDatabase(t)
const card = await startProcess(t, 'card-auth', 'services/card-auth/main.ts', laneEnv('card-auth', db.env, db.laneUrl('card-auth')))
const sandbox = await startProcess(t, 'tax-sandbox', 'services/tax-sandbox/main.ts', { TAX_SANDBOX_PORT: '0' })
// The hung lane: answers its status polls (SATURATED, 7 of 30 permits) until the
// lanes test hangs it; from then on it accepts connections, reads, never answers.
const sockets = new Set<net.Socket>()
let hang = false
const hung = net.createServer(s => {
  sockets.add(s); s.on('error', () => {}); s.on('close', () => sockets.delete(s))
  s.on('data', () => {
    if (hang) return
    const body = JSON.stringify({ state: 'SATURATED', active: 7, permits: 30, rejections: {}, latency: { p99Ms: 1 } })
    s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
  })
})
await new Promise<void>(resolve => hung.listen(0, '127.0.0.1', resolve))
t.teardown(() => { for (const s of sockets) s.destroy(); hung.close() })
const hungUrl = `http://127.0.0.1:${(hung.address() as net.AddressInfo).port}`
const deck = await startDeck(t, db, { cardAuth: card.url, fraud: hungUrl, sandbox: sandbox.url })

const ROUTES: Array<[string, string, unknown?]> = [
  ['GET', '/admin/lanes'], ['GET', '/admin/timeline'], ['GET', '/admin/queues'],
  ['PATCH', '/admin/queues/fraud-async', { maxWorkers: 1 }], ['GET', '/admin/queues/fraud-async/dead'],
  ['POST', '/admin/queues/fraud-async/dead/requeue', {}], ['GET', '/admin/faults/tax'], ['PUT', '/admin/faults/tax', { latencyMs: 5 }],
  ['GET', '/admin/no-such-route'],
]

t.test('every admin route needs the admin token', async t => {
  const bad: Array<[string, Record<string, string>]> = [
    ['no header', {}],
    ['wrong token', { authorization: 'Bearer ' + 'x'.repeat(32) }],
    ['the right token with another scheme', { authorization: `Basic ${deck.token}` }],
    ['a prefix of the right token', { authorization: `Bearer ${deck.token.slice(0, -1)}` }],
  ]
  for (const [method, path, json] of ROUTES) {
    for (const [why, headers] of bad) {
      const r = await call(deck.url + path, { method, json, headers })
      t.equal(r.status, 401, `${method} ${path}: ${why}`)
      t.equal(r.body.code, 'ERR_UNAUTHENTICATED')
      t.match(r.headers['www-authenticate'], /^Bearer /)
      t.match(r.headers['content-type'], /^application\/problem\+json/)
    }
  }
  const mw = (await db.query("select max_workers from jobs.queues where name = 'fraud-async'"))[0]!.max_workers
  t.equal(mw, 10, 'no unauthenticated PATCH changed the queue')
  const f = await call(sandbox.url + '/faults')
  t.equal(f.body.latencyMs, 0, 'no unauthenticated PUT reached the sandbox')
  t.equal((await deck.admin('GET', '/admin/no-such-route')).status, 404, 'with the token, an unknown route is a plain 404')
})

t.test('lanes: gathered from each process, one hung lane costs at most its deadline', async t => {
  const fraudUp = async (): Promise<boolean | undefined> => (await deck.admin('GET', '/admin/lanes')).body.lanes.find((l: { name: string }) => l.name === 'fraud')?.up
  t.ok(await eventually(async () => await fraudUp() === true, 10_000, 50), 'the lane-to-be-hung answered the deck first')
  hang = true
  const r = await eventually(async () => {
    const x = await deck.admin('GET', '/admin/lanes')
    const lanes = x.body.lanes as Array<{ name: string, checkedAt: string, up: boolean }>
    return lanes.every(l => l.checkedAt > new Date(0).toISOString()) && lanes.some(l => l.name === 'fraud' && !l.up) ? x : undefined
  }, 10_000, 100)
  t.ok(r, 'polled')
  // The page's data comes from the collector's last round, never from a poll made
  // for the request, so a hung lane cannot hold this answer (it would hang forever).
  const { body, status } = await deck.admin('GET', '/admin/lanes')
  t.equal(status, 200, 'answered with a hung lane in the fleet')
  const byName = Object.fromEntries(body.lanes.map((l: { name: string }) => [l.name, l]))
  const c = byName['card-auth']
  t.match(c, { up: true, error: null, status: { state: 'NORMAL', permits: laneLimits('card-auth').permits, active: 0, queue: { depth: 0, capacity: laneLimits('card-auth').queue } } }, 'card-auth up and NORMAL')
  t.match(c.status.pool, { total: Number, idle: Number, waiting: 0 }, 'pool total/idle/waiting')
  t.match(c.status.latency, { windowSeconds: 60 }, 'last-minute latency window')
  t.match(byName.fraud, { up: false, error: 'timeout', status: null }, 'the hung lane is down by timeout')
  t.same(byName.fraud.lastSeen && { state: byName.fraud.lastSeen.state, active: byName.fraud.lastSeen.active, permits: byName.fraud.lastSeen.permits }, { state: 'SATURATED', active: 7, permits: 30 },
    'and keeps the last status it did answer, for the tile (UNRESPONSIVE, last seen …)')
  t.ok(Date.parse(byName.fraud.lastSeen.at) < Date.parse(byName.fraud.checkedAt), 'that status is from an earlier poll')
  t.comment(`the hung lane cost ${byName.fraud.pollMs.toFixed(0)} ms of the round (its deadline: 200 ms)`)
  t.match(byName.tax, { up: false, error: 'refused', lastSeen: null }, 'the lane that is not running is down, refused, never seen')
  t.match(body.processes, [{ name: 'tax-sandbox', kind: 'sandbox', up: true }], 'other processes: up/down')
  // Resident memory as each process reports it (the drill sums these for the fleet's RSS).
  const cardPid = (await call(card.url + '/status')).body.pid
  t.equal(c.status.pid, cardPid, 'the card-auth tile is that process')
  t.ok(c.rssBytes > 10e6 && c.rssBytes < 2e9, `a lane reports its RSS (${(c.rssBytes / 1e6).toFixed(0)} MB)`)
  t.ok(body.processes[0].rssBytes > 10e6, 'so does a non-lane process, on /health/live')
  t.equal(byName.fraud.rssBytes, null, 'a hung lane has no RSS figure, not a stale one')
  t.ok(body.deck.rssBytes > 10e6 && body.deck.pid > 0, 'and the deck its own')

  const metrics = await call(card.url + '/metrics')
  t.match(metrics.body, /^# TYPE bulkhead_request_latency_seconds gauge$/m, 'the lane serves its one-minute window in /metrics too')
})

t.test('timeline keeps points for the chart', async t => {
  const r = await eventually(async () => { const x = await deck.admin('GET', '/admin/timeline?seconds=60'); return x.body.points.length >= 3 ? x : undefined }, 5_000, 100)
  t.ok(r, 'three polls or more')
  const p = r!.body.points.at(-1)
  t.match(p.lanes['card-auth'], { up: true, state: 'NORMAL', active: 0 })
  t.match(p.lanes.fraud, { up: false, state: null })
  t.ok(r!.body.points.every((x: { t: number }, i: number, a: Array<{ t: number }>) => i === 0 || x.t > a[i - 1]!.t), 'in time order')
  for (const bad of ['seconds=0', 'seconds=-1', 'seconds=abc', 'seconds=99999', 'other=1']) {
    const x = await deck.admin('GET', `/admin/timeline?${bad}`)
    t.equal(x.status, 400, bad)
    t.equal(x.body.code, 'ERR_VALIDATION')
  }
})

t.test('queues: depth, running vs MaxWorkers, controls that validate and are logged', async t => {
  await db.query("insert into jobs.jobs_hot (queue, type, payload, status, scheduled_at, lease, worker_id) values ('fraud-async', 'noop', '{}', 'pending', now() - interval '30 seconds', null, null), ('fraud-async', 'noop', '{}', 'processing', now(), gen_random_uuid(), 'w-test')")
  const q = await deck.admin('GET', '/admin/queues')
  const fa = q.body.queues.find((x: { name: string }) => x.name === 'fraud-async')
  t.match(fa, {
    maxWorkers: 10,
    paused: false,
    active: true,
    zombieTimeoutSeconds: 60,
    jobs: { pending: 1, fetched: 0, processing: 1, dead: 0 },
    running: 1,
  })
  t.ok(fa.oldestPendingAgeSeconds >= 29, `oldest pending age ${fa.oldestPendingAgeSeconds} s`)

  const p = await deck.admin('PATCH', '/admin/queues/fraud-async', { maxWorkers: 4, zombieTimeoutSeconds: 30 }, { 'x-operator': 'alice' })
  t.equal(p.status, 200)
  t.match(p.body, { name: 'fraud-async', maxWorkers: 4, zombieTimeoutSeconds: 30 })
  t.match((await db.query("select max_workers, zombie_timeout_seconds from jobs.queues where name = 'fraud-async'"))[0], { max_workers: 4, zombie_timeout_seconds: 30 }, 'in the database')
  t.equal((await deck.admin('PATCH', '/admin/queues/fraud-async', { maxWorkers: null })).body.maxWorkers, null, 'unlimited')
  t.equal((await db.query("select max_workers from jobs.queues where name = 'fraud-async'"))[0]!.max_workers, null)
  t.equal((await deck.admin('PATCH', '/admin/queues/tax-reconcile', { paused: true, active: false })).body.paused, true, 'pause and deactivate')
  await deck.admin('PATCH', '/admin/queues/tax-reconcile', { paused: false, active: true })

  const logged = await eventually(async () => deck.proc.log.find(l => l.includes('"admin change"') && l.includes('"alice"')), 3_000, 50)
  t.ok(logged, 'the change is logged')
  const entry = JSON.parse(logged!)
  t.match(entry, { who: { operator: 'alice', ip: '127.0.0.1' }, what: { action: 'queue.update', queue: 'fraud-async', patch: { maxWorkers: 4, zombieTimeoutSeconds: 30 }, before: { maxWorkers: 10 }, after: { maxWorkers: 4 } } }, 'with who and what, before and after')
  t.notOk(deck.proc.log.some(l => l.includes(deck.token)), 'the admin token is never logged')

  const invalid: Array<[string, unknown]> = [
    ['empty patch', {}], ['negative', { maxWorkers: -1 }], ['string', { maxWorkers: '3' }], ['fraction', { maxWorkers: 1.5 }],
    ['unknown field', { maxWorkers: 2, turbo: true }], ['zombie 0', { zombieTimeoutSeconds: 0 }], ['paused as string', { paused: 'yes' }],
    ['array', [1]], ['null body', null],
  ]
  for (const [why, body] of invalid) {
    const r = await deck.admin('PATCH', '/admin/queues/fraud-async', body)
    t.equal(r.status, 400, why)
    t.equal(r.body.code, 'ERR_VALIDATION', why)
  }
  t.equal((await deck.admin('PATCH', '/admin/queues/no-such-queue', { maxWorkers: 1 })).body.code, 'ERR_QUEUE_NOT_FOUND')
  t.equal((await deck.admin('PATCH', '/admin/queues/NOT%20A%20NAME', { maxWorkers: 1 })).status, 400, 'a malformed name')
  const text = await call(deck.url + '/admin/queues/fraud-async', { method: 'PATCH', raw: 'maxWorkers=1', headers: { authorization: `Bearer ${deck.token}`, 'content-type': 'application/x-www-form-urlencoded' } })
  t.equal(text.status, 415, 'JSON only')
  t.equal((await db.query("select max_workers from jobs.queues where name = 'fraud-async'"))[0]!.max_workers, null, 'no refused request changed anything')
})

t.test('dead letters: list and requeue', async t => {
  await db.query(`insert into jobs.jobs_dead (id, queue, type, payload, priority, attempts, max_attempts, reason, last_error, created_at)
                  values (900001, 'fraud-async', 'fraud.score', '{"screeningId":"x"}', 0, 5, 5, 'max_attempts', '<img src=x onerror=alert(1)>', now()),
                         (900002, 'fraud-async', 'fraud.score', '{}', 0, 1, 5, 'fatal', 'bad payload', now())`)
  const list = await deck.admin('GET', '/admin/queues/fraud-async/dead')
  t.equal(list.status, 200)
  t.same(list.body.jobs.map((j: { id: string }) => j.id).sort(), ['900001', '900002'])
  t.match(list.body.jobs.find((j: { id: string }) => j.id === '900001'), { type: 'fraud.score', reason: 'max_attempts', attempts: 5, lastError: '<img src=x onerror=alert(1)>' })
  t.equal((await deck.admin('GET', '/admin/queues/fraud-async/dead?limit=1')).body.jobs.length, 1, 'limit')
  t.equal((await deck.admin('GET', '/admin/queues/nope/dead')).body.code, 'ERR_QUEUE_NOT_FOUND')

  for (const bad of [{ ids: [] }, { ids: ['abc'] }, { ids: [900001] }, { ids: ['1', '1'] }, { all: true }]) {
    const r = await deck.admin('POST', '/admin/queues/fraud-async/dead/requeue', bad)
    t.equal(r.status, 400, JSON.stringify(bad))
  }
  const one = await deck.admin('POST', '/admin/queues/fraud-async/dead/requeue', { ids: ['900001'] })
  t.match(one.body, { queue: 'fraud-async', requeued: 1 })
  t.match(await db.query('select status, attempts from jobs.jobs_hot where id = 900001'), [{ status: 'pending', attempts: 0 }], 'back to pending with fresh attempts')
  t.equal((await db.query('select 1 from jobs.jobs_dead where id = 900001')).length, 0, 'no longer dead')
  t.equal((await deck.admin('POST', '/admin/queues/tax-reconcile/dead/requeue', { ids: ['900002'] })).body.requeued, 0, "another queue's dead job is not touched")
  t.equal((await deck.admin('POST', '/admin/queues/fraud-async/dead/requeue', {})).body.requeued, 1, 'requeue all')
  t.equal((await db.query("select 1 from jobs.jobs_dead where queue = 'fraud-async'")).length, 0)
})

t.test('tax faults are forwarded to the sandbox, validated, and logged', async t => {
  const r = await deck.admin('PUT', '/admin/faults/tax', { latencyMs: 1234, errorRate: 0.25 }, { 'x-operator': 'bob' })
  t.equal(r.status, 200)
  t.match(r.body, { latencyMs: 1234, errorRate: 0.25, mode: 'normal' })
  t.match((await call(sandbox.url + '/faults')).body, { latencyMs: 1234, errorRate: 0.25 }, 'the sandbox has it')
  t.match((await deck.admin('GET', '/admin/faults/tax')).body, { latencyMs: 1234 })
  for (const bad of [{ latencyMs: -1 }, { errorRate: 2 }, { mode: 'explode' }, { latency: 5 }]) {
    t.equal((await deck.admin('PUT', '/admin/faults/tax', bad)).status, 400, JSON.stringify(bad))
  }
  const logged = await eventually(async () => deck.proc.log.find(l => l.includes('"faults.tax"') && l.includes('"bob"')), 3_000, 50)
  t.ok(logged, 'logged with who')
  t.match(JSON.parse(logged!).what, { before: { latencyMs: 0 }, after: { latencyMs: 1234 } })
  await deck.admin('PUT', '/admin/faults/tax', { mode: 'normal' })
  t.equal((await call(sandbox.url + '/faults')).body.latencyMs, 0, 'back to normal')
})

t.test('the page is public and empty of data; its headers lock it to this origin', async t => {
  const page = await call(deck.url + '/')
  t.equal(page.status, 200)
  t.match(page.headers['content-type'], /^text\/html/)
  t.match(page.headers['content-security-policy'], /script-src 'self'/)
  t.equal(page.headers['x-frame-options'], 'DENY')
  const pid = String((await call(card.url + '/status')).body.pid)
  t.notOk(page.body.includes(pid) || /fraud-async|tax-reconcile|NORMAL/.test(page.body), 'no lane or queue data in the page itself')
  for (const asset of ['/deck.css', '/vendor/uplot.js', '/vendor/uplot.css']) t.equal((await call(deck.url + asset)).status, 200, asset)
  // The page's script is ES modules: each one it loads, from index.html's entry
  // through their imports, comes as JavaScript (the browser runs no module of
  // another type) with the page's headers; none in public/deck/ is left out.
  const todo = [...page.body.matchAll(/<script type="module" src="([^"]+)"><\/script>/g)].map(m => m[1]!)
  t.same(todo, ['/deck/main.js'], 'the page loads one entry module')
  const loaded = new Set<string>()
  for (let url = todo.pop(); url; url = todo.pop()) {
    if (loaded.has(url)) continue
    loaded.add(url)
    const r = await call(deck.url + url)
    t.equal(r.status, 200, url)
    t.match(r.headers, { 'content-type': /^text\/javascript/, 'cache-control': 'no-cache', 'content-security-policy': /script-src 'self'/, 'x-content-type-options': 'nosniff' }, `${url} is JavaScript, with the page's headers`)
    for (const m of String(r.body).matchAll(/^import .* from '(\.\/[^']+)'$/gm)) todo.push(new URL(m[1]!, deck.url + url).pathname)
  }
  t.same([...loaded].sort(), fs.readdirSync(path.join(ROOT, 'services/deck/public/deck')).map(f => `/deck/${f}`).sort(), 'every module of public/deck/, reached from the entry')
  t.equal((await call(deck.url + '/../package.json')).status, 401, 'an unknown path without the token is 401 (default deny)')
  t.equal((await deck.admin('GET', '/../package.json')).status, 404, 'and with it a plain 404: no path reaches the filesystem')
  const m = await call(deck.url + '/metrics')
  t.match(m.body, /deck_target_up\{target="fraud",kind="lane",process="deck"\} 0/, 'the deck reports what it cannot reach')
  t.match(m.body, /deck_target_up\{target="card-auth",kind="lane",process="deck"\} 1/)
})

t.test('without a sandbox, fault injection is off; a dead sandbox is a 502', async t => {
  // The deck role's CONNECTION LIMIT (2) is one deck's pool: one deck at a time.
  await deck.proc.kill()
  const prod = await startDeck(t, db, { cardAuth: card.url })
  const r = await prod.admin('PUT', '/admin/faults/tax', { latencyMs: 10 })
  t.equal(r.status, 404)
  t.equal(r.body.code, 'ERR_FAULT_INJECTION_DISABLED')
  await prod.proc.kill()
  const gone = await startDeck(t, db, { cardAuth: card.url, sandbox: 'http://127.0.0.1:9' })
  const g = await gone.admin('PUT', '/admin/faults/tax', { latencyMs: 10 })
  t.equal(g.status, 502)
  t.equal(g.body.code, 'ERR_SANDBOX_UNAVAILABLE')
  t.equal(g.headers['retry-after'], '1')
})
