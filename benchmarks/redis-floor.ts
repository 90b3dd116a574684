// The floor under issue 42's cost target, run by `npm run bench -- cost --redis`
// in the same sitting, on its redis-server: what one decision's trip to Redis
// costs with nothing of the gateway around it, paced as the load is.
//   - bare: one EVALSHA of a script that answers at once, with a decision's
//     keys and arguments, over an ioredis client set up as the store's is: one
//     round trip per request, the least any shared store can cost;
//   - store: the retry guard's store itself (gateway/guard-store.ts), a decision
//     on a new key and its answer's release, as the gateway makes them.
// CPU per call of this process (less the same pacing with no call) and of the
// redis-server, from /proc/<pid>/stat. Prints one JSON line.
//
//   node --import tsx benchmarks/redis-floor.ts <redis port> <redis pid> <rate> <seconds>
import { Redis } from 'ioredis'
import { RedisGuardStore } from '../gateway/guard-store.ts'
import { runOpenLoop } from './open-loop.ts'
import { cpuUs } from './proc-cpu.ts'

const [port, pid, rate, seconds] = process.argv.slice(2).map(Number)
if (!port || !pid || !rate || !seconds) {
  console.error('usage: node --import tsx benchmarks/redis-floor.ts <redis port> <redis pid> <rate> <seconds>')
  process.exit(2)
}
const url = `redis://127.0.0.1:${port}`
const self = (): number => { const u = process.cpuUsage(); return u.user + u.system }

/** CPU µs per call of this process and of the redis-server, over `seconds` at `rate`. */
async function paced (
  send: (i: number) => Promise<unknown>
): Promise<{ client: number, server: number, calls: number }> {
  const c0 = self()
  const s0 = cpuUs(pid!)!
  const r = await runOpenLoop({
    rate: rate!, durationMs: seconds! * 1000, send: async i => { await send(i); return 200 },
  })
  return { client: (self() - c0) / r.completed, server: (cpuUs(pid!)! - s0) / r.completed, calls: r.completed }
}

// Set up as the store's client is (gateway/guard-store.ts).
const bare = new Redis(url, {
  enableOfflineQueue: false, autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 0, enableAutoPipelining: false,
}) as Redis & { wtNothing (...args: Array<string | number>): Promise<number[]> }
bare.defineCommand('wtNothing', { lua: 'return { 0, 0, 0 }' })
const store = new RedisGuardStore({ url, budgetMs: 250, prefix: `wt-floor-${process.pid}:` }, {
  windowMs: 10_000,
  perKeyAttempts: 4,
  holdMs: 12_000,
  budgetRatio: 0.1,
  budgetFloor: 10,
  clientRateMax: 1_000_000,
  clientRateWindowMs: 1_000,
})
try {
  if (!await store.connected(5_000)) throw new Error(`no Redis at ${url}`)
  if (bare.status !== 'ready') await new Promise(resolve => bare.once('ready', resolve))
  const run = `${process.pid}-${Date.now()}`
  const bareCall = (i: number): Promise<unknown> => bare.wtNothing(
    5, 'rate:c', 'win:c', `seen:c\u0000${run}-${i}`, `log:c\u0000${run}-${i}`, `dec:${run}-${i}`,
    `${run}-${i}`, 1, 10_000, 4, 12_000, 0.1, 10, 1_000_000, 1_000, 100_000)
  const storeCall = async (i: number): Promise<unknown> => {
    const d = await store.decide('floor-client', `${run}-${i}`, `${run}-${i}`)
    store.answered('floor-client', `${run}-${i}`, `${run}-${i}`, true, 0)
    return d
  }
  // Each path once unmeasured first: its code compiled, its connection open.
  for (const f of [bareCall, storeCall]) for (let i = 0; i < 2_000; i++) await f(-1 - i)
  const pacing = await paced(async () => {})
  const b = await paced(bareCall)
  const s = await paced(i => storeCall(i + 1_000_000))
  const less = (x: number): number => Math.max(0, x - pacing.client)
  console.log(JSON.stringify({
    bare: { client: less(b.client), server: b.server, calls: b.calls },
    store: { client: less(s.client), server: s.server, calls: s.calls },
    pacing: pacing.client,
  }))
} finally {
  await store.close()
  bare.disconnect()
}
