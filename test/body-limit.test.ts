// A body over the limit reaches the client as 413 problem+json, also when the
// client is still sending it: the answer waits until the rest of the body has
// been read away (shared/http-app.ts), so the connection is not reset under a
// client that has not read the answer yet. A client sending a huge or endless
// body cannot hold the socket: reading it away stops at 8 MiB or 5 s, and the
// connection closes 1 s after the answer (time for the client to read it).
// Against a real gateway process, with undici fetch (Node's global fetch).
import net from 'node:net'
import t from 'tap'
import { startLoneGateway } from './helpers/gateway.ts'

const gw = await startLoneGateway(t)
const THREE_MB = Buffer.from(JSON.stringify({ merchantId: 'm', cardToken: 'tok_big', amount: { value: 1, currency: 'EUR' }, pad: 'x'.repeat(3 * 1024 * 1024) }))

async function post (body: () => BodyInit, i: number): Promise<string> {
  try {
    const r = await fetch(gw.url + '/v1/authorizations', {
      method: 'POST',
      body: body(),
      duplex: 'half',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${gw.apiKey}`, 'idempotency-key': `big-${i}` },
    } as RequestInit)
    const p = await r.json() as { code?: string }
    return `${r.status} ${r.headers.get('content-type')?.split(';')[0]} ${p.code}`
  } catch (err) {
    const c = (err as { cause?: { code?: string, message?: string } }).cause
    return `fetch failed: ${c?.code ?? c?.message ?? String(err)}`
  }
}

const WANT = '413 application/problem+json ERR_PAYLOAD_TOO_LARGE'
const tally = (xs: string[]): Record<string, number> =>
  xs.reduce<Record<string, number>>((m, x) => { m[x] = (m[x] ?? 0) + 1; return m }, {})

t.test('a 3 MB body with Content-Length: every one of 20 fetches gets the 413', async t => {
  const got: string[] = []
  for (let i = 0; i < 20; i++) got.push(await post(() => THREE_MB, i))
  t.same(tally(got), { [WANT]: 20 }, 'every fetch received the 413 problem')
})

t.test('a 3 MB body streamed (chunked): every one of 20 fetches gets the 413', async t => {
  // The gateway refuses it after 16 KiB, long before the client has sent the rest.
  const stream = (): ReadableStream<Uint8Array> => new ReadableStream({
    start (c) {
      for (let o = 0; o < THREE_MB.length; o += 64 * 1024) c.enqueue(THREE_MB.subarray(o, o + 64 * 1024))
      c.close()
    },
  })
  const got: string[] = []
  for (let i = 0; i < 20; i++) got.push(await post(stream, 100 + i))
  t.same(tally(got), { [WANT]: 20 }, 'every fetch received the 413 problem')
})

/** A raw client sending a body that never ends: how much it got to send, and what it read back. */
function endless (mode: 'fast' | 'slow', key = `endless-${mode}`): Promise<{ sent: number, answer: string }> {
  return new Promise((resolve, reject) => {
    const { port } = new URL(gw.url)
    const s = net.connect(Number(port), '127.0.0.1')
    let sent = 0
    let answer = ''
    let trickle: NodeJS.Timeout | undefined
    const guard = setTimeout(() => { s.destroy(); reject(new Error(`${mode}: the gateway kept the socket open for 60 s`)) }, 60_000)
    s.on('data', d => { answer += d.toString('latin1') })
    s.on('error', () => {})
    s.on('close', () => { clearTimeout(guard); clearInterval(trickle); resolve({ sent, answer }) })
    const head = `POST /v1/authorizations HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer ${gw.apiKey}\r\nidempotency-key: ${key}\r\ncontent-type: application/json\r\n`
    if (mode === 'slow') {
      // Announces 100 MB, then sends 10 bytes every 100 ms.
      s.write(head + 'content-length: 100000000\r\n\r\n')
      trickle = setInterval(() => { if (!s.destroyed) { s.write('aaaaaaaaaa'); sent += 10 } }, 100)
    } else {
      s.write(head + 'transfer-encoding: chunked\r\n\r\n')
      const chunk = `10000\r\n${'a'.repeat(0x10000)}\r\n`
      const pump = (): void => {
        while (!s.destroyed) {
          sent += 0x10000
          if (!s.write(chunk)) { s.once('drain', pump); return }
        }
      }
      pump()
    }
  })
}

t.test('an endless body, sent as fast as possible, is cut off after some MiB, and the client is told 413 first: 10 of 10 times', async t => {
  // This client writes as long as the socket takes its bytes and reads only when
  // it must wait: with the socket destroyed right after the answer, it lost the
  // 413 to the reset in 19 of 30 tries.
  const runs: Array<{ sent: number, answer: string }> = []
  for (let i = 0; i < 10; i++) runs.push(await endless('fast', `endless-fast-${i}`))
  t.same(runs.filter(r => !/^HTTP\/1\.1 413 /.test(r.answer)).length, 0, 'every one was told 413 first')
  const most = Math.max(...runs.map(r => r.sent))
  t.ok(most < 64 * 1024 * 1024, `the gateway closed each connection after reading at most ${(most / 2 ** 20).toFixed(1)} MiB (bound: 8 MiB read, plus socket buffers)`)
})

t.test('an endless body sent slowly is cut off after a few seconds', async t => {
  const r = await endless('slow')
  t.match(r.answer, /^HTTP\/1\.1 413 /, 'it was told 413')
  t.ok(r.sent > 0, `the gateway read on for a while (${r.sent} bytes) and then closed the connection`)
})
