// The deck's admin API cannot be reached without the token by spelling its
// URL another way. Against a real deck process (and a real sandbox and
// PostgreSQL behind it): every admin route with every method, spelled
// percent-encoded, with doubled slashes, in mixed case, with a trailing slash
// and with dot segments, without a token and with a wrong one, sent exactly
// as written (no client-side URL normalisation). None may answer anything but
// 401, and nothing may change: the queues, a dead job, the sandbox's faults.
// Unknown paths are 401 too; only the page's files, the probes and /metrics
// are open.
import net from 'node:net'
import t from 'tap'
import { testDatabase } from './helpers/db.ts'
import { startDeck } from './helpers/deck.ts'
import { agent, call } from './helpers/http.ts'
import { startProcess } from './helpers/procs.ts'

const db = await testDatabase(t)
const sandbox = await startProcess(t, 'tax-sandbox', 'services/tax-sandbox/main.ts', { TAX_SANDBOX_PORT: '0' })
const deck = await startDeck(t, db, { sandbox: sandbox.url })
await db.query(`insert into jobs.jobs_dead (id, queue, type, payload, priority, attempts, max_attempts, reason, last_error, created_at)
                values (910001, 'fraud-async', 'fraud.score', '{}', 0, 5, 5, 'max_attempts', 'boom', now())`)
const queuesNow = async () => db.query('select name, max_workers, paused, active, zombie_timeout_seconds, updated_at from jobs.queues order by name')
const queuesBefore = await queuesNow()
const NORMAL_FAULTS = { latencyMs: 0, jitterMs: 0, errorRate: 0, mode: 'normal' }

interface Raw { status: number, headers: Record<string, unknown>, text: string }

/** A request with the path exactly as given: undici's dispatcher sends it unparsed. */
async function raw (path: string, method: string, headers: Record<string, string>, body?: unknown): Promise<Raw> {
  const res = await agent.request({
    origin: deck.url,
    path,
    method: method as 'GET',
    headers: { ...headers, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() }
}

/** The same route, spelled the ways a router, a proxy or a client might read as the same. */
function spellings (path: string): string[] {
  const segs = path.split('/').slice(1)
  const hex = (c: string): string => '%' + c.charCodeAt(0).toString(16).padStart(2, '0')
  const firstEncoded = segs.map(s => hex(s[0]!) + s.slice(1))
  return [...new Set([
    path,
    // percent-encoded: one letter, every letter (upper and lower hex), the slashes, twice over
    '/' + firstEncoded.join('/'),
    '/' + segs.map(s => [...s].map(hex).join('')).join('/'),
    '/' + segs.map(s => [...s].map(c => hex(c).toUpperCase()).join('')).join('/'),
    '/' + segs.join('%2F'),
    '/' + segs.join('%2f'),
    '/' + segs.map(s => '%25' + s.charCodeAt(0).toString(16) + s.slice(1)).join('/'),
    // doubled slashes
    '/' + path,
    '/' + segs.join('//'),
    path + '//',
    // mixed case
    path.toUpperCase(),
    '/' + segs.map(s => s[0]!.toUpperCase() + s.slice(1)).join('/'),
    // trailing slash, with a query string, with a path parameter
    path + '/',
    path + '/?x=1',
    path + ';x=1',
    // dot segments, plain and encoded
    '/.' + path,
    '/' + segs[0] + '/.' + path.slice(segs[0]!.length + 1),
    '/x/..' + path,
    path + '/.',
    '/%2e' + path,
    '/x/%2e%2e' + path,
    '/x/%2E%2E' + path,
  ])]
}

const ADMIN: Array<{ path: string, body: unknown }> = [
  { path: '/admin/lanes', body: {} },
  { path: '/admin/timeline', body: {} },
  { path: '/admin/queues', body: {} },
  { path: '/admin/queues/fraud-async', body: { maxWorkers: 1, paused: true, active: false } },
  { path: '/admin/queues/fraud-async/dead', body: {} },
  { path: '/admin/queues/fraud-async/dead/requeue', body: {} },
  { path: '/admin/faults/tax', body: { latencyMs: 8000 } },
  { path: '/admin', body: {} },
  { path: '/admin/no-such-route', body: {} },
]
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']
const NO_ENTRY: Array<[string, Record<string, string>]> = [
  ['no token', {}],
  ['a wrong token', { authorization: 'Bearer ' + 'w'.repeat(32) }],
]

/** What is wrong with an answer to a request without the right token (undefined: a proper 401). */
function refusedProperly (r: Raw, method: string): string | undefined {
  if (r.status !== 401) return `status ${r.status}: ${r.text.slice(0, 120)}`
  if (method === 'HEAD') return r.text === '' ? undefined : 'HEAD with a body'
  let body: { code?: string } = {}
  try { body = JSON.parse(r.text) } catch { return `not JSON: ${r.text.slice(0, 120)}` }
  return body.code === 'ERR_UNAUTHENTICATED' ? undefined : `code ${String(body.code)}`
}

t.test('no spelling of an admin route, with any method, answers without the right token', async t => {
  const wrong: string[] = []
  let sent = 0
  for (const { path, body } of ADMIN) {
    for (const spelled of spellings(path)) {
      for (const method of METHODS) {
        for (const [why, headers] of NO_ENTRY) {
          const r = await raw(spelled, method, headers, ['POST', 'PUT', 'PATCH'].includes(method) ? body : undefined)
          sent++
          const bad = refusedProperly(r, method)
          if (bad) wrong.push(`${method} ${spelled} (${why}): ${bad}`)
        }
      }
    }
  }
  t.ok(sent > 2_000, `${sent} requests sent`)
  t.same(wrong.slice(0, 20), [], `every one refused with 401 ERR_UNAUTHENTICATED (${wrong.length} were not)`)

  t.same(await queuesNow(), queuesBefore, 'no queue changed (MaxWorkers, paused, active, zombie timeout, updated_at)')
  t.equal((await db.query('select 1 from jobs.jobs_dead where id = 910001')).length, 1, 'the dead job was not requeued')
  t.equal((await db.query('select 1 from jobs.jobs_hot where id = 910001')).length, 0)
  t.same((await call(sandbox.url + '/faults')).body, NORMAL_FAULTS, "the sandbox's faults stayed normal")
  t.notOk(deck.proc.log.some(l => l.includes('"admin change"')), 'no admin change was logged')
})

t.test('a request-target in absolute form or `*`, or a malformed one, is refused too', async t => {
  const port = new URL(deck.url).port
  const send = (line: string): Promise<string> => new Promise((resolve, reject) => {
    const s = net.connect(Number(port), '127.0.0.1')
    let out = ''
    s.on('data', d => { out += d.toString() })
    s.on('end', () => resolve(out))
    s.on('error', reject)
    s.end(`${line}\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n\r\n`)
  })
  const lines: Array<[string, number]> = [
    [`GET http://127.0.0.1:${port}/admin/lanes HTTP/1.1`, 401],
    [`GET http://127.0.0.1:${port}/%61dmin/lanes HTTP/1.1`, 401],
    ['OPTIONS * HTTP/1.1', 401],
    ['GET /admin/lanes HTTP/1.0', 401],
    // Fastify answers a URL it cannot decode 400 before routing (FST_ERR_BAD_URL): no route, no data.
    ['GET /%zz/admin/lanes HTTP/1.1', 400],
    ['GET /admin/lanes% HTTP/1.1', 400],
  ]
  for (const [line, want] of lines) {
    const res = await send(line)
    t.equal(Number(/^HTTP\/1\.[01] (\d{3})/.exec(res)?.[1]), want, line)
    t.notMatch(res, /"lanes"|"queues"|"processes"/, `${line}: no fleet data`)
  }
})

t.test('the spellings reach the admin routes: with the token they are served', async t => {
  const auth = { authorization: `Bearer ${deck.token}` }
  const lanes = await raw('/%61dmin/lanes', 'GET', auth)
  t.equal(lanes.status, 200, 'the router decodes /%61dmin/lanes to /admin/lanes')
  t.match(JSON.parse(lanes.text), { lanes: Array })
  t.equal((await raw('/admin/%71ueues', 'GET', auth)).status, 200)
  t.equal((await raw('/ADMIN/lanes', 'GET', auth)).status, 404, 'paths are case-sensitive: with the token an unknown path is a plain 404')
  t.equal((await raw('/admin/lanes', 'HEAD', auth)).status, 200, 'HEAD with the token')
})

t.test('unknown paths are 401 without the token, not 404', async t => {
  for (const path of ['/nope', '/admin/nope', '/.env', '/../package.json', '/services/deck/main.ts', '/deck.js', '/deck/', '/deck/nope.js', '/deck/main.js/x', '/deck/../package.json', '/vendor/', '/health', '/health/', '/metrics/x', '/openapi.json']) {
    for (const method of ['GET', 'POST', 'OPTIONS']) {
      const r = await raw(path, method, {})
      t.equal(r.status, 401, `${method} ${path}`)
    }
  }
})

t.test('open without the token: only the page, the probes and /metrics', async t => {
  for (const path of ['/', '/deck/main.js', '/deck/api.js', '/deck.css', '/vendor/uplot.js', '/vendor/uplot.css', '/health/live', '/health/ready', '/metrics']) {
    t.equal((await raw(path, 'GET', {})).status, 200, `GET ${path}`)
    t.equal((await raw(path, 'HEAD', {})).status, 200, `HEAD ${path}`)
  }
  const m = await raw('/metrics', 'GET', {})
  t.notMatch(m.text, /fraud-async|tax-reconcile/, 'metrics carry no queue data')
  t.equal((await raw('/', 'POST', {}, {})).status, 401, 'another method on an open path is not open')
})
