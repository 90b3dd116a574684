// `npm run bench -- transport`: what one HTTP hop costs in CPU on this machine with
// nothing of ours in it, the floor under the gateway -> lane hop of
// `bench:cost`. A bare node:http server (a child process, on cpu 0) answering a
// small JSON body, and an undici Pool (this process, on cpu 1) posting to it
// open-loop at --rate, over loopback TCP and over a Unix socket, alternated
// (TCP, Unix, TCP, Unix, ...). Prints CPU µs per request of each side, read from
// /proc/<pid>/stat. The gateway is both sides at once: a server for its clients
// and an undici client of the lane.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Pool } from 'undici'
import { hasTaskset, pinSelf } from './local-fleet.ts'
import { cpuUs } from './proc-cpu.ts'
import { gitCommit, machine, numberFlag, parseFlags, sleep } from './run-info.ts'

const { values: a } = parseFlags({
  options: {
    rate: { type: 'string', default: '1400' },
    seconds: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '2' },
  }
})
const rate = numberFlag(a, 'rate', 1, 100_000)
const seconds = numberFlag(a, 'seconds', 1, 3_600)
const rounds = numberFlag(a, 'rounds', 1, 20)
const command = `npm run bench -- transport --rate ${rate} --seconds ${seconds} --rounds ${rounds}`

const SERVER = `
import http from 'node:http'
import fs from 'node:fs'
const body = JSON.stringify({ id: 'a1b2c3d4-0000-4000-8000-000000000000', status: 'approved', amount: { value: 100, currency: 'EUR' }, createdAt: new Date().toISOString() })
const s = http.createServer((req, res) => {
  req.on('data', () => {})
  req.on('end', () => { res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }); res.end(body) })
})
s.keepAliveTimeout = 60_000
const where = process.argv[1]
if (where.startsWith('/')) { fs.rmSync(where, { force: true }); s.listen(where, () => console.log('listening')) } else s.listen(0, '127.0.0.1', () => console.log('listening ' + s.address().port))
`

const cpu = (pid: number): number => cpuUs(pid) ?? NaN

async function hop (transport: 'tcp' | 'unix'): Promise<{ client: number, server: number, errors: number }> {
  const sock = path.join(os.tmpdir(), `wt-transport-${process.pid}.sock`)
  const child = spawn(process.execPath, ['--input-type=module', '-e', SERVER, transport === 'unix' ? sock : 'tcp'], { stdio: ['ignore', 'pipe', 'inherit'] })
  pinSelf('0', child.pid)
  try {
    const line = await new Promise<string>((resolve, reject) => {
      child.stdout!.once('data', d => resolve(String(d).trim()))
      child.once('exit', code => reject(new Error(`server exited ${code}`)))
    })
    const pool = transport === 'unix'
      ? new Pool('http://localhost', { socketPath: sock, connections: 64 })
      : new Pool(`http://127.0.0.1:${line.split(' ')[1]}`, { connections: 64 })
    const payload = JSON.stringify({ merchantId: 'm_1', cardToken: 'tok_abcdefgh', amount: { value: 100, currency: 'EUR' } })
    let errors = 0
    const send = (): Promise<void> => pool.request({ method: 'POST', path: '/v1/authorizations', headers: { 'content-type': 'application/json' }, body: payload })
      .then(r => r.body.dump(), () => { errors++ })
    for (let i = 0; i < 2_000; i++) await send() // warm: connections open, code optimized
    const c0 = cpu(process.pid); const s0 = cpu(child.pid!)
    const n = rate * seconds
    const t0 = performance.now()
    const inflight: Array<Promise<void>> = []
    for (let i = 0; i < n; i++) {
      const wait = t0 + (i * 1000) / rate - performance.now()
      if (wait > 1) await sleep(wait)
      inflight.push(send())
    }
    await Promise.all(inflight)
    const r = { client: (cpu(process.pid) - c0) / n, server: (cpu(child.pid!) - s0) / n, errors }
    await pool.close()
    return r
  } finally {
    child.kill()
    fs.rmSync(sock, { force: true })
  }
}

pinSelf('1')
const rows: string[] = []
for (let r = 1; r <= rounds; r++) {
  for (const t of ['tcp', 'unix'] as const) {
    const x = await hop(t)
    rows.push(`| ${r} | ${t === 'tcp' ? 'loopback TCP' : 'Unix socket'} | ${x.client.toFixed(0)} | ${x.server.toFixed(0)} | ${(x.client + x.server).toFixed(0)} | ${x.errors} |`)
  }
}
console.log(`\n${command}`)
console.log(`${new Date().toISOString()}, commit ${gitCommit()}, ${machine({ kernel: true })}; server on cpu 0, client on cpu 1${hasTaskset() ? '' : ' (no taskset: not pinned)'}\n`)
console.log('| round | transport | undici client µs/req | node:http server µs/req | both | errors |')
console.log('|---|---|---:|---:|---:|---:|')
console.log(rows.join('\n'))
