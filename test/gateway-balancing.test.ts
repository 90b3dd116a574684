// The gateway's lane replicas (gateway/replica-set.ts): found by name and
// re-resolved, checked on /health/ready, chosen by least outstanding requests
// with a slow start, ejected for a bounded time on transport errors only — a
// lane's own 429 or 503 is an answer, never a reason to eject. Real HTTP servers
// on loopback addresses stand in for the replicas (127.0.0.2, 127.0.0.3: one
// port, two addresses, as a name with two replicas resolves), and a real
// gateway process balances over two of them.
import http from 'node:http'
import type net from 'node:net'
import t, { type Test } from 'tap'
import { ReplicaSet, type Replica } from '../gateway/replica-set.ts'
import { startLoneGateway } from './helpers/gateway.ts'
import { call, eventually } from './helpers/http.ts'

interface Fake {
  server: http.Server
  port: number
  hits: number
  ready: number
  answer: number
  setReady (code: number): void
  close (): Promise<void>
}

/** A replica stand-in: /health/ready answers `ready`, everything else `answer` (a problem+json for 4xx/5xx). */
async function fake (t: Test, host: string, port = 0, answer = 200): Promise<Fake> {
  const f = { hits: 0, ready: 200, answer } as Fake
  f.server = http.createServer((req, res) => {
    if (req.url === '/health/ready') { res.writeHead(f.ready, { 'content-type': 'application/json' }).end('{}'); return }
    f.hits++
    const problem = f.answer >= 400
    res.writeHead(f.answer, { 'content-type': problem ? 'application/problem+json' : 'application/json', ...(problem ? { 'retry-after': '1' } : {}) })
      .end(JSON.stringify(problem ? { type: 'about:blank', title: 'busy', status: f.answer, code: f.answer === 429 ? 'ERR_CARD_AUTH_SATURATED' : 'ERR_TAX_BULKHEAD_SATURATED' } : { ok: true }))
  })
  await new Promise<void>((resolve, reject) => f.server.once('error', reject).listen(port, host, () => resolve()))
  f.port = (f.server.address() as net.AddressInfo).port
  f.setReady = code => { f.ready = code }
  f.close = () => new Promise(resolve => { f.server.closeAllConnections(); f.server.close(() => resolve()) })
  t.teardown(() => f.close())
  return f
}

/**
 * Two stand-ins on one port, at 127.0.0.2 and 127.0.0.3 (a port free on the
 * first may be taken on the second: tried again).
 */
async function pair (t: Test): Promise<[Fake, Fake]> {
  for (let i = 0; ; i++) {
    const a = await fake(t, '127.0.0.2')
    try { return [a, await fake(t, '127.0.0.3', a.port)] } catch (err) { await a.close(); if (i > 20) throw err }
  }
}

const OPTS = {
  cap: 8,
  pool: { timeoutMs: 2_000, connectTimeoutMs: 500, maxResponseBytes: 1 << 20 },
  resolveEveryMs: 60_000,
  checkEveryMs: 60_000,
  ejectMs: 2_000,
  ejectMaxMs: 30_000,
  slowStartMs: 0,
}
const share = (picks: Array<Replica | undefined>, r: Replica): number =>
  picks.filter(p => p === r).length / picks.length

t.test('a name stands for every address it resolves to; one gone from it is drained', async t => {
  const [a, b] = await pair(t)
  let addresses = ['127.0.0.2', '127.0.0.3']
  const set = new ReplicaSet({ ...OPTS, lane: 'card-auth', url: `http://card-auth.test:${a.port}`, lookup: async () => addresses })
  t.teardown(() => set.close())
  await set.start()
  t.same(set.replicas.map(r => [r.address, r.state]).sort(), [[`127.0.0.2:${a.port}`, 'ready'], [`127.0.0.3:${b.port}`, 'ready']], 'both addresses, both checked ready')
  const picks = Array.from({ length: 400 }, () => set.pick())
  const [ra, rb] = set.replicas.sort((x, y) => x.address.localeCompare(y.address)) as [Replica, Replica]
  t.ok(share(picks, ra) > 0.3 && share(picks, ra) < 0.7, `idle replicas share evenly (${share(picks, ra)} / ${share(picks, rb)})`)
  addresses = ['127.0.0.3']
  await set.resolve()
  t.same(set.replicas.map(r => r.address), [`127.0.0.3:${b.port}`], 'the vanished address is dropped')
  t.equal(ra.state, 'gone', 'and takes no new requests')
  const failing = new ReplicaSet({ ...OPTS, lane: 'card-auth', url: `http://card-auth.test:${a.port}`, lookup: async () => { throw Object.assign(new Error('no such host'), { code: 'ENOTFOUND' }) } })
  t.teardown(() => failing.close())
  await failing.start()
  t.equal(failing.pick(), undefined, 'a name that does not resolve: no replica')
  t.match(failing.resolveError, /card-auth\.test: ENOTFOUND/, 'and says why')
})

t.test('unready replicas leave the rotation; with none ready, any is still tried', async t => {
  const a = await fake(t, '127.0.0.1')
  const b = await fake(t, '127.0.0.1')
  const set = new ReplicaSet({ ...OPTS, lane: 'tax', url: `http://127.0.0.1:${a.port}, http://127.0.0.1:${b.port}` })
  t.teardown(() => set.close())
  a.setReady(503)
  await set.start()
  const [ra, rb] = set.replicas as [Replica, Replica]
  t.same([ra.state, rb.state], ['unready', 'ready'])
  t.ok(Array.from({ length: 50 }, () => set.pick()).every(p => p === rb), 'only the ready one is chosen')
  b.setReady(503)
  await set.check()
  const picks = new Set(Array.from({ length: 50 }, () => set.pick()))
  t.ok(picks.has(ra) && picks.has(rb), 'none ready: both are still tried (a lone unready lane answers for itself)')
  a.setReady(200)
  await set.check()
  t.ok(Array.from({ length: 50 }, () => set.pick()).every(p => p === ra), 'the one ready again takes them all')
})

t.test('least outstanding requests, within each replica\'s cap', async t => {
  const a = await fake(t, '127.0.0.1')
  const b = await fake(t, '127.0.0.1')
  const set = new ReplicaSet({ ...OPTS, lane: 'card-auth', url: `http://127.0.0.1:${a.port},http://127.0.0.1:${b.port}` })
  t.teardown(() => set.close())
  await set.start()
  const [ra, rb] = set.replicas as [Replica, Replica]
  ra.inflight = 3
  t.equal(set.pick(), rb, 'the one with fewer in flight')
  rb.inflight = 5
  t.equal(set.pick(), ra)
  ra.inflight = OPTS.cap
  rb.inflight = OPTS.cap
  t.equal(set.pick(), undefined, 'every replica at its cap: none (the lane is saturated)')
  ra.inflight = rb.inflight = 0
})

t.test('a transport failure ejects for a bounded time, doubled per failure in a row', async t => {
  const a = await fake(t, '127.0.0.1')
  const b = await fake(t, '127.0.0.1')
  let now = 1_000_000
  const set = new ReplicaSet({ ...OPTS, lane: 'card-auth', url: `http://127.0.0.1:${a.port},http://127.0.0.1:${b.port}`, now: () => now })
  t.teardown(() => set.close())
  await set.start()
  const [ra, rb] = set.replicas as [Replica, Replica]
  set.failed(ra)
  const until = ra.ejectedUntil
  set.failed(ra)
  t.equal(ra.ejectedUntil, until, 'the requests in flight on it when it failed do not eject it again')
  t.ok(Array.from({ length: 20 }, () => set.pick()).every(p => p === rb), 'ejected: not chosen')
  now += OPTS.ejectMs
  t.ok(new Set(Array.from({ length: 50 }, () => set.pick())).has(ra), `back after ${OPTS.ejectMs} ms`)
  set.failed(ra)
  now = ra.ejectedUntil
  set.failed(ra)
  t.equal(ra.ejectedUntil - now, OPTS.ejectMs * 4, 'the third failure in a row: four times as long')
  for (let i = 0; i < 10; i++) { now = ra.ejectedUntil; set.failed(ra) }
  t.equal(ra.ejectedUntil - now, OPTS.ejectMaxMs, 'never longer than the max')
  t.equal(ra.ejections, 13, 'each ejection counted once')
  set.answered(ra)
  t.equal(ra.failuresInRow, 0, 'an answer ends the run of failures')
})

t.test('slow start: a replica that just turned ready gets a growing share', async t => {
  const a = await fake(t, '127.0.0.1')
  const b = await fake(t, '127.0.0.1')
  let now = 1_000_000
  const set = new ReplicaSet({ ...OPTS, slowStartMs: 10_000, lane: 'card-auth', url: `http://127.0.0.1:${a.port},http://127.0.0.1:${b.port}`, now: () => now })
  t.teardown(() => set.close())
  b.setReady(503)
  await set.start()
  const [ra, rb] = set.replicas as [Replica, Replica]
  b.setReady(200)
  await set.check()
  t.equal(rb.readySince, now, 'b turned ready now')
  ra.inflight = 4
  t.equal(set.pick(), ra, 'at a tenth of its share b waits while a has fewer than 10 in flight')
  now += 5_000
  t.equal(set.pick(), rb, 'half way through, a with 4 in flight scores worse than b with none')
  ra.inflight = 1
  now += 5_000
  t.equal(set.pick(), rb, 'at the end, equal: the one with fewer in flight')
  ra.inflight = 0
})

t.test('through a gateway: a lane\'s 429 and 503 are answers, and a replica that stops answering is ejected, its requests sent to the other', async t => {
  const a = await fake(t, '127.0.0.1', 0, 429)
  const b = await fake(t, '127.0.0.1', 0, 503)
  const gw = await startLoneGateway(t, { TAX_URL: `http://127.0.0.1:${a.port},http://127.0.0.1:${b.port}`, GATEWAY_HEALTH_CHECK_MS: '200', GATEWAY_SLOW_START_MS: '0' })
  const get = () => call(`${gw.url}/v1/tax/quotes/00000000-0000-4000-8000-000000000000`, { headers: { authorization: `Bearer ${gw.apiKey}` } })
  const first = await Promise.all(Array.from({ length: 100 }, get))
  t.same([...new Set(first.map(r => r.status))].sort(), [429, 503], 'the lanes\' own answers pass through')
  t.ok(a.hits > 30 && b.hits > 30, `both replicas keep their share (${a.hits} / ${b.hits})`)
  const metrics = (): Promise<string> => call(gw.url + '/metrics').then(r => r.body as string)
  t.match(await metrics(), /gateway_upstream_ejections_total\{lane="tax"[^}]*\} 0/, 'nothing ejected for a 429 or a 503')
  const status = (await call(gw.url + '/status')).body as { lanes: Record<string, Array<{ address: string, state: string, requests: number, ejections: number }>> }
  t.same(status.lanes.tax!.map(r => [r.address, r.state, r.requests > 30, r.ejections]).sort(), [[`127.0.0.1:${a.port}`, 'ready', true, 0], [`127.0.0.1:${b.port}`, 'ready', true, 0]].sort(), 'its /status shows each replica: ready, its requests, no ejections (the deck shows it)')
  for (const f of [a, b]) t.match(await metrics(), new RegExp(`gateway_upstream_replica_state\\{lane="tax",replica="127.0.0.1:${f.port}",state="ready"[^}]*\\} 1`), `127.0.0.1:${f.port} ready`)

  await a.close()
  b.hits = 0
  b.answer = 200
  const second = await Promise.all(Array.from({ length: 40 }, get))
  t.same(second.filter(r => r.status !== 200).map(r => r.body?.code ?? r.status), [], 'the stopped replica\'s requests were sent to the other (refused connections are safe to resend)')
  t.equal(b.hits, 40, 'all on the one left')
  t.ok(await eventually(async () => new RegExp(`replica="127.0.0.1:${a.port}",state="(ejected|unready)"[^}]*\\} 1`).test(await metrics()), 2_000, 100), 'the stopped replica is out of rotation within 2 s')

  const back = await fake(t, '127.0.0.1', a.port, 429)
  t.ok(await eventually(async () => { await get(); return back.hits > 0 }, 10_000, 100), 'back in rotation once it answers its checks again')
})
