// The open-loop generator holds its arrival rate even when the server is slow,
// and counts the queueing delay from each request's scheduled send time.
import http from 'node:http'
import t from 'tap'
import { Pool } from 'undici'
import { runOpenLoop, summary } from './load/open-loop.ts'

async function server (delayMs: number) {
  const s = http.createServer((_req, res) => setTimeout(() => res.end('ok'), delayMs))
  await new Promise<void>(r => s.listen(0, '127.0.0.1', r))
  const url = `http://127.0.0.1:${(s.address() as { port: number }).port}`
  return { url, close: () => new Promise<void>(r => s.close(() => r())) }
}

t.test('holds 300 req/s for 2 s against a server that takes 20 ms', async t => {
  const s = await server(20)
  const pool = new Pool(s.url, { connections: 64 })
  t.teardown(async () => { await pool.close(); await s.close() })
  const r = await runOpenLoop({ rate: 300, durationMs: 2_000, send: async () => { const res = await pool.request({ path: '/', method: 'GET' }); await res.body.dump(); return res.statusCode } })
  t.equal(r.scheduled, 600)
  t.equal(r.completed, 600)
  t.same(r.statuses, { 200: 600 })
  t.ok(Math.abs(r.sentRate - 300) / 300 < 0.05, `sent at ${r.sentRate.toFixed(1)} req/s`)
  const s1 = summary(r.histogram)
  t.ok(s1.p50Ms >= 20 && s1.p50Ms < 60, `p50 ${s1.p50Ms} ms includes the 20 ms service time`)
})

t.test('a server that cannot keep up shows its queueing delay (no coordinated omission)', async t => {
  const s = await server(50)
  // 5 connections x 20 req/s each = 100 req/s of capacity, offered 200 req/s.
  const pool = new Pool(s.url, { connections: 5 })
  t.teardown(async () => { await pool.close(); await s.close() })
  const r = await runOpenLoop({ rate: 200, durationMs: 1_000, send: async () => { const res = await pool.request({ path: '/', method: 'GET' }); await res.body.dump(); return res.statusCode } })
  const s2 = summary(r.histogram)
  // The last request waits behind ~100 others: about 1 s of queueing, which a
  // closed-loop tool measuring from the actual send would report as ~50 ms.
  t.ok(s2.maxMs > 700, `max latency ${s2.maxMs} ms counts the time spent queued`)
  t.ok(Math.abs(r.sentRate - 200) / 200 < 0.05, `and arrivals kept their schedule (${r.sentRate.toFixed(1)} req/s)`)
})
