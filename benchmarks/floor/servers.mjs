// The servers of `npm run bench:floor` (floor-bench.ts), bare node:http with
// nothing of the fleet in them. Run as a child process:
//   node servers.mjs server none|insert|group [databaseUrl]   answers a small JSON body
//     none: at once; insert: after one autocommit INSERT on its one connection
//     (synchronous_commit on: durable when it returns); group: after the INSERT of
//     the batch it joined (everything that arrived while the last commit ran, as the
//     lanes' group-commit writer does)
//   node servers.mjs proxy <upstream port>                  forwards with an undici Pool, as the gateway does
// Listens on a free loopback port and prints it on stdout. Each answer carries
// `Server-Timing: answer;dur=` (its arrival in the process to its answer).
import http from 'node:http'
import { setImmediate } from 'node:timers'
import pg from 'pg'
import { Pool } from 'undici'

const [role, arg, databaseUrl] = process.argv.slice(2)
const ANSWER = JSON.stringify({ id: '00000000-0000-4000-8000-000000000000', rate: 0.19, source: 'compensation' })
const INSERT = {
  name: 'floor-insert',
  // Every key is new (the bench makes them so): a repeated one fails its request
  // (500) rather than passing as a write that wrote nothing.
  text: 'insert into floor_quotes (id, idempotency_key, body) select gen_random_uuid(), k, b from unnest($1::text[], $2::jsonb[]) as t(k, b)',
}

function readBody (req, then) {
  const chunks = []
  req.on('data', c => chunks.push(c))
  req.on('end', () => then(Buffer.concat(chunks)))
}

function answer (res, at, status = 200, body = ANSWER, extra = '') {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'server-timing': `${extra}answer;dur=${(performance.now() - at).toFixed(3)}` })
  res.end(body)
}

let handle
if (role === 'proxy') {
  const upstream = new Pool(`http://127.0.0.1:${arg}`, { connections: 128 })
  handle = (req, res, at) => readBody(req, async body => {
    try {
      const r = await upstream.request({ method: 'POST', path: req.url, headers: { 'content-type': 'application/json', 'idempotency-key': req.headers['idempotency-key'] }, body })
      const text = await r.body.text()
      answer(res, at, r.statusCode, text, `${r.headers['server-timing']}, `.replace('answer;', 'upstream;'))
    } catch (err) { answer(res, at, 502, JSON.stringify({ error: String(err) })) }
  })
} else if (arg === 'none') {
  handle = (req, res, at) => readBody(req, body => { JSON.parse(body); answer(res, at) })
} else {
  const db = new pg.Client({ connectionString: databaseUrl, application_name: 'watertight-bench-floor' })
  await db.connect()
  let queue = []
  let flushing = false
  const flush = async () => {
    flushing = true
    while (queue.length > 0) {
      await new Promise(resolve => setImmediate(resolve))
      const batch = queue
      queue = []
      try {
        await db.query(INSERT, [batch.map(w => w.key), batch.map(w => w.body)])
        for (const w of batch) w.done(200)
      } catch { for (const w of batch) w.done(500) }
    }
    flushing = false
  }
  handle = (req, res, at) => readBody(req, body => {
    const text = body.toString()
    JSON.parse(text)
    const done = status => answer(res, at, status)
    if (arg === 'group') {
      queue.push({ key: req.headers['idempotency-key'], body: text, done })
      if (!flushing) void flush()
    } else {
      db.query(INSERT, [[req.headers['idempotency-key']], [text]]).then(() => done(200), () => done(500))
    }
  })
}
const server = http.createServer((req, res) => handle(req, res, performance.now()))
server.keepAliveTimeout = 60_000
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
