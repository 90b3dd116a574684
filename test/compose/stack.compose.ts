// `npm run test:compose`: the real image, built with the real Dockerfile, and
// the real Compose stack, driven from the host through its published ports
// only. Run alone, not by `npm test` (it needs a Docker engine and takes
// minutes); `.ci/run` runs it after the suite. Everything it starts is removed
// at the end, containers, networks and volumes, on the failure path too.
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { createKey } from '../../shared/api-keys.ts'
import {
  buildImages, composeCommand, composeExec, containers, down, ensureBaseImages, ensureEngine, ensureSecrets,
  expectedContainers, stackOf, up, waitHealthy, writeCredentials, type StackOptions,
} from '../../deploy/compose/stack.ts'
import { call, eventually, type Res } from '../helpers/http.ts'
import { runOpenLoop, summary } from '../../benchmarks/open-loop.ts'

const run = promisify(execFile)
const PROJECT_PREFIX = 'wt-compose-test-'
const staleProjects = async (): Promise<string[]> => {
  const { stdout } = await run('docker', ['ps', '-a', '--format', '{{.Label "com.docker.compose.project"}}'])
  return [...new Set(stdout.split('\n').filter(p => p.startsWith(PROJECT_PREFIX)))]
}
// The whole run, the image build and the stack's start included (tap's own default is 30 s).
t.setTimeout(20 * 60_000)
const say = (l: string): void => { t.comment(l) }
const freePort = (): Promise<number> => new Promise((resolve, reject) => {
  const s = net.createServer().once('error', reject).listen(0, '127.0.0.1', () => { const p = (s.address() as net.AddressInfo).port; s.close(() => resolve(p)) })
})

// The test's own knobs over the stack's file: its own key folder (the repo's is
// left alone), and a fraud lane of one permit and no queue, so a burst of
// screenings overflows to the async queue as a saturated lane does.
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-compose-'))
fs.mkdirSync(path.join(dir, 'keys'))
const apiKey = createKey(path.join(dir, 'keys/api-keys.json'), 'compose-test')
const override = path.join(dir, 'override.yml')
fs.writeFileSync(override, `services:
  gateway:
    volumes: ["${path.join(dir, 'keys')}:/run/watertight/keys:ro"]
  fraud:
    environment:
      FRAUD_PERMITS: "1"
      FRAUD_QUEUE: "0"
`)

/** A free port whose next one is free too: two gateways are published on both. */
const freePortPair = async (): Promise<number> => {
  for (let i = 0; i < 50; i++) {
    const p = await freePort()
    const next = await new Promise<boolean>(resolve => { const s = net.createServer().once('error', () => resolve(false)).listen(p + 1, '127.0.0.1', () => s.close(() => resolve(true))) })
    if (next && p < 65_535) return p
  }
  throw new Error('no two consecutive free ports on 127.0.0.1')
}

// card-auth at two replicas: the gateway balances them (gateway/replica-set.ts).
// Two gateways, sharing the retry limits in the stack's redis.
const o: StackOptions = { project: `${PROJECT_PREFIX}${process.pid}`, replicas: { 'card-auth': 2 }, gateways: 2, gatewayPort: await freePortPair(), deckPort: await freePort(), overrides: [override], log: say }
const gw = `http://127.0.0.1:${o.gatewayPort}`
const gw2 = `http://127.0.0.1:${o.gatewayPort! + 1}`
const deck = `http://127.0.0.1:${o.deckPort}`

const t0 = Date.now()
await ensureEngine(say)
const compose = await composeCommand()
// A run killed outright (SIGKILL, a timeout's signal) could not remove its stack: the next one does.
for (const stale of await staleProjects()) {
  say(`removing the stack of a run that did not end: ${stale}`)
  await down(stackOf(compose, { ...o, project: stale }), { volumes: true }).catch(err => say(`could not remove ${stale}: ${(err as Error).message}`))
}
const s = stackOf(compose, o)
const removeStack = async (): Promise<void> => {
  await down(s, { volumes: true }).catch(err => say(`down failed: ${(err as Error).message}`))
  fs.rmSync(dir, { recursive: true, force: true })
}
t.teardown(removeStack)
for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => { void removeStack().finally(() => process.exit(130)) })
process.on('exit', () => { console.log(`${t.counts.pass} passed, ${t.counts.fail} failed`) })

const base = await ensureBaseImages(say)
const tBuild = Date.now()
await buildImages(base, say)
say(`images built in ${((Date.now() - tBuild) / 1000).toFixed(0)} s`)
const secrets = ensureSecrets()
await up(s, o)
await waitHealthy(s, expectedContainers(o))
say(`stack healthy ${((Date.now() - t0) / 1000).toFixed(0)} s after the start`)
const creds = await writeCredentials(s, o, { apiKey, adminToken: secrets.ADMIN_TOKEN! }, path.join(dir, 'credentials.json'))
const card = creds.demoCards[0]!

const auth = { authorization: `Bearer ${apiKey}` }
const admin = { authorization: `Bearer ${creds.adminToken}` }
let seq = 0
const key = (p: string): string => `${p}-${process.pid}-${++seq}`
const authorize = (k = key('auth'), value = 1): Promise<Res> => call(`${gw}/v1/authorizations`, { json: { merchantId: 'm_compose', cardToken: card.token, amount: { value, currency: card.currency } }, headers: { ...auth, 'idempotency-key': k } })
const quote = (k = key('tax')): Promise<Res> => call(`${gw}/v1/tax/quotes`, { json: { jurisdiction: 'DE', amount: { value: 10_000, currency: 'EUR' } }, headers: { ...auth, 'idempotency-key': k } })
const containerOf = async (service: string) => (await containers(s)).find(c => c.service === service)!
const metric = async (name: string): Promise<Array<{ labels: Record<string, string>, value: number }>> => {
  const text = (await call(`${gw}/metrics`)).body as string
  return [...text.matchAll(new RegExp(`^${name}\\{(.*)\\} (\\S+)$`, 'gm'))].map(m => ({
    labels: Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map(l => [l[1]!, l[2]!])), value: Number(m[2]),
  }))
}
/** Requests the gateway sent to each card-auth replica so far, by address. */
const cardReplicaRequests = async (): Promise<Map<string, number>> =>
  new Map((await metric('gateway_upstream_replica_requests_total')).filter(m => m.labels.lane === 'card-auth').map(m => [m.labels.replica!, m.value]))
const replicaState = async (address: string): Promise<string | undefined> =>
  (await metric('gateway_upstream_replica_state')).find(m => m.labels.lane === 'card-auth' && m.labels.replica === address && m.value === 1)?.labels.state
const ipOf = async (id: string): Promise<string[]> =>
  Object.values(JSON.parse((await run('docker', ['inspect', '--format', '{{json .NetworkSettings.Networks}}', id])).stdout) as Record<string, { IPAddress: string }>).map(n => n.IPAddress)
const pidOf = async (id: string): Promise<number> => Number((await run('docker', ['inspect', '--format', '{{.State.Pid}}', id])).stdout.trim())

/** Card authorizations at `rate`/s for `ms` while `during` runs: every answer, and the p99 (reported, not asserted). */
async function cardLoad (
  rate: number, ms: number, during: () => Promise<void> = async () => {}
): Promise<{ statuses: Record<string, number>, p99Ms: number }> {
  const load = runOpenLoop({ rate, durationMs: ms, send: async () => (await authorize()).status })
  await during()
  const r = await load
  return { statuses: r.statuses, p99Ms: summary(r.histogram).p99Ms }
}

t.test('smoke: the data plane and the deck through the published ports', async t => {
  const k = key('smoke')
  const first = await authorize(k, 125)
  t.equal(first.status, 201, 'an authorization')
  t.equal(first.body.status, 'approved')
  const again = await authorize(k, 125)
  t.equal(again.status, 201)
  t.equal(again.headers['idempotent-replayed'], 'true', 'its replay')
  t.same(again.body, first.body, 'the same answer')
  t.equal((await call(`${gw}/v1/authorizations/${first.body.id}`, { headers: auth })).status, 200, 'read back')

  const screen = (): Promise<Res> => call(`${gw}/v1/fraud/screenings`, { json: { cardToken: card.token, amount: { value: 990, currency: card.currency }, merchantId: 'm_compose' }, headers: { ...auth, 'idempotency-key': key('fraud') } })
  const burst = await Promise.all(Array.from({ length: 40 }, screen))
  const sync = burst.find(r => r.status === 200)
  const queued = burst.find(r => r.status === 202)
  t.match(sync?.body, { mode: 'sync', decision: /approve|review|decline/ }, 'a screening scored at once')
  t.match(queued?.body, { mode: 'async', status: 'queued' }, 'one over the lane\'s permit queued for the worker')
  t.same(burst.filter(r => r.status !== 200 && r.status !== 202).map(r => r.status), [], 'every screening 200 or 202')
  if (queued) {
    const done = await eventually(async () => {
      const r = await call(gw + queued.headers.location, { headers: auth })
      return r.status === 200 && typeof r.body.score === 'number' ? r.body : undefined
    }, 60_000, 500)
    t.ok(done, 'the queued screening shows its result once worker-fraud ran it')
  }

  const q = await quote()
  t.equal(q.status, 200, 'a tax quote')
  t.equal(q.body.source, 'provider', 'from the provider (the sandbox)')

  const pan = await call(`${gw}/v1/authorizations`, { json: { merchantId: 'm_compose', cardToken: '4111111111111111', amount: { value: 1, currency: 'EUR' } }, headers: { ...auth, 'idempotency-key': key('pan') } })
  t.equal(pan.status, 422)
  t.equal(pan.body.code, 'ERR_PAN_NOT_ACCEPTED', 'a raw card number refused')

  t.equal((await call(`${deck}/admin/lanes`)).status, 401, 'the deck\'s API without the token')
  const lanes = await call(`${deck}/admin/lanes`, { headers: admin })
  t.equal(lanes.status, 200, 'and with it')
  t.ok(JSON.stringify(lanes.body).includes('card-auth'), 'lists the lanes')
})

t.test('tax brownout through the deck: card-auth unaffected, tax compensated', async t => {
  const set = await call(`${deck}/admin/faults/tax`, { method: 'PUT', json: { latencyMs: 8_000 }, headers: admin })
  t.equal(set.status, 200, 'the sandbox at 8 s')
  t.teardown(async () => { await call(`${deck}/admin/faults/tax`, { method: 'PUT', json: { latencyMs: 0, jitterMs: 0, errorRate: 0, mode: 'normal' }, headers: admin }) })
  const tax = runOpenLoop({ rate: 10, durationMs: 10_000, send: async () => { const r = await quote(); return r.status === 200 ? (r.body.source === 'compensation' ? 299 : 200) : r.status } })
  const card = await cardLoad(50, 10_000)
  const quotes = await tax
  t.same(Object.keys(card.statuses), ['201'], `every authorization 201 (${JSON.stringify(card.statuses)}); card-auth p99 ${card.p99Ms.toFixed(1)} ms in the brownout (reported, not asserted)`)
  // 299 stands for "200 from compensation" in the load tool's status tally.
  t.same(Object.keys(quotes.statuses), ['299'], `every tax quote answered from the certified compensation (${JSON.stringify(quotes.statuses)})`)
})

t.test('a crashed tax lane: card-auth unaffected, tax restarted by its policy and healthy', async t => {
  const before = await containerOf('tax')
  const card = await cardLoad(30, 15_000, async () => {
    // A crash as the engine sees one: the container's process killed from the
    // host. (`docker kill` is an operator's stop: Docker turns the restart
    // policy off for it until the container is started again.)
    await run('kill', ['-KILL', String(await pidOf(before.id))])
  })
  t.same(Object.keys(card.statuses), ['201'], `every authorization 201 while tax was down (${JSON.stringify(card.statuses)}, p99 ${card.p99Ms.toFixed(1)} ms)`)
  const back = await eventually(async () => {
    const c = await containerOf('tax')
    return c.restarts > before.restarts && c.health === 'healthy' ? c : undefined
  }, 120_000, 1_000)
  t.ok(back, 'restarted by its restart policy and healthy again')
  t.ok(await eventually(async () => (await quote()).status === 200, 30_000, 500), 'quotes answered again')
})

t.test('two gateways share their retry limits in redis, and serve on when redis crashes', async t => {
  const storeUp = async (url = gw): Promise<boolean> => /^gateway_retry_guard_store_up(?:\{[^}]*\})? 1$/m.test(String((await call(`${url}/metrics`)).body))
  t.ok(await eventually(async () => (await storeUp(gw) && await storeUp(gw2)) || undefined, 30_000, 500), 'both gateways\' retry guard store is up')
  // The INC-4491 limit across both gateways: four attempts of one key, then refused wherever it lands.
  const shared = key('shared')
  const attempt = (url: string): Promise<Res> => call(`${url}/v1/authorizations`, { json: { merchantId: 'm_compose', cardToken: card.token, amount: { value: 1, currency: card.currency } }, headers: { ...auth, 'idempotency-key': shared } })
  const four = []
  for (let i = 0; i < 4; i++) four.push((await attempt(i % 2 === 0 ? gw : gw2)).status)
  t.same(four, [201, 201, 201, 201], 'four attempts of one key alternating between the two gateways')
  t.equal((await attempt(gw2)).body?.code, 'ERR_RETRY_STORM_BLOCKED', 'the fifth refused: one limit for both')
  const before = await containerOf('redis')
  const load = await cardLoad(30, 8_000, async () => { await run('kill', ['-KILL', String(await pidOf(before.id))]) })
  t.same(Object.keys(load.statuses), ['201'], `every authorization 201 while redis was down (${JSON.stringify(load.statuses)}, p99 ${load.p99Ms.toFixed(1)} ms)`)
  t.ok(await eventually(async () => { const c = await containerOf('redis'); return c.restarts > before.restarts && c.health === 'healthy' ? c : undefined }, 120_000, 1_000), 'redis restarted by its policy and healthy')
  t.ok(await eventually(async () => await storeUp() || undefined, 30_000, 500), 'and the gateway shares its limits there again')
})

t.test('the image\'s health check turns a hung lane unhealthy', async t => {
  const tax = await containerOf('tax')
  const pid = await pidOf(tax.id)
  await run('kill', ['-STOP', String(pid)])
  t.teardown(async () => { await run('kill', ['-CONT', String(pid)]).catch(() => {}) })
  const card = await cardLoad(30, 5_000)
  t.same(Object.keys(card.statuses), ['201'], `card-auth unaffected by the hung tax lane (${JSON.stringify(card.statuses)})`)
  t.ok(await eventually(async () => (await containerOf('tax')).health === 'unhealthy', 120_000, 1_000), 'tax unhealthy while hung')
  await run('kill', ['-CONT', String(pid)])
  t.ok(await eventually(async () => (await containerOf('tax')).health === 'healthy', 120_000, 1_000), 'healthy again once it runs')
})

t.test('card-auth at two replicas: both serve; one killed mid-load costs only what was on it, is ejected, and comes back', async t => {
  const before = await cardReplicaRequests()
  t.equal(before.size, 2, `the gateway knows both replicas (${[...before.keys()].join(', ')})`)
  const steady = await cardLoad(40, 8_000)
  t.same(Object.keys(steady.statuses), ['201'], `steady load all 201 (${JSON.stringify(steady.statuses)}, p99 ${steady.p99Ms.toFixed(1)} ms)`)
  const after = await cardReplicaRequests()
  const served = [...after].map(([a, n]) => [a, n - (before.get(a) ?? 0)] as const)
  const total = served.reduce((n, [, k]) => n + k, 0)
  for (const [a, n] of served) t.ok(n / total >= 0.3 && n / total <= 0.7, `${a} served ${n} of ${total} (${(100 * n / total).toFixed(0)}%)`)

  const victim = (await containers(s)).find(c => c.service === 'card-auth')!
  const addresses = await ipOf(victim.id)
  const address = [...after.keys()].find(a => addresses.some(ip => a.startsWith(`${ip}:`)))!
  t.ok(address, `the replica killed is ${address}`)
  const answers: Res[] = []
  const load = runOpenLoop({
    rate: 40,
    durationMs: 12_000,
    send: async () => { const r = await authorize(); answers.push(r); return r.status },
  })
  await eventually(async () => answers.length >= 100, 10_000, 20)
  await run('kill', ['-KILL', String(await pidOf(victim.id))])
  const killedAt = Date.now()
  const out = await eventually(async () => { const st = await replicaState(address); return st && st !== 'ready' ? st : undefined }, 2_000, 50)
  t.ok(out, `out of rotation within 2 s of the kill (${out ?? 'still ready'}, ${Date.now() - killedAt} ms)`)
  await load
  const failed = answers.filter(r => r.status !== 201)
  t.ok(failed.every(r => r.body?.code === 'ERR_LANE_UNAVAILABLE' && !/ECONNREFUSED|CONNECT_TIMEOUT/.test(r.body.detail)), `only requests already on the killed replica failed (${failed.length} of ${answers.length}: ${[...new Set(failed.map(r => r.body?.detail))].join('; ') || 'none'})`)
  const restarted = await eventually(async () => {
    const c = (await containers(s)).find(x => x.id === victim.id)
    return c && c.restarts > victim.restarts && c.health === 'healthy' ? c : undefined
  }, 120_000, 500)
  t.ok(restarted, 'restarted by its restart policy and healthy')
  // Its address after the restart (Docker keeps it as a rule; the gateway re-resolves the name if not).
  const ips = await ipOf(victim.id)
  const again = await eventually(async () => {
    const a = [...(await cardReplicaRequests()).keys()].find(x => ips.some(ip => x.startsWith(`${ip}:`)))
    return a && (await replicaState(a)) === 'ready' ? a : undefined
  }, 60_000, 500)
  t.ok(again, `ready at the gateway again (${again ?? 'not yet'})`)
  const n0 = (await cardReplicaRequests()).get(again!) ?? 0
  await cardLoad(40, 12_000)
  t.ok(((await cardReplicaRequests()).get(again!) ?? 0) > n0, 'and back in rotation: it serves again')
})

t.test('the stack\'s processes stay inside their roles\' budgets', async t => {
  const r = await composeExec(s, ['exec', '-T', 'postgres', 'psql', '-U', 'watertight', '-d', 'watertight', '-Atc', "select rolname, rolconnlimit, (select count(*) from pg_stat_activity a where a.usename = r.rolname) from pg_roles r where rolname like '%\\_ds' order by 1"])
  t.equal(r.code, 0, r.err)
  for (const line of r.out.trim().split('\n')) {
    const [role, limit, used] = line.split('|')
    t.ok(Number(used) <= Number(limit), `${role}: ${used} of ${limit} connections`)
  }
})
