// `npm run bench -- <name> [flags]`: the one entry point to the benchmarks, so
// the root package.json keeps a script per purpose rather than one per file.
// Each runs under tsx as its own process; its flags pass through as they are.
import { spawn } from 'node:child_process'
import path from 'node:path'

const BENCHES = {
  drill: { file: 'drill/main.ts', what: 'the recovery drill MC-RT-01 under a real tax brownout', node: ['--max-semi-space-size=64'] },
  compare: { file: 'compare/main.ts', what: 'the spec\'s comparison table: the fleet against a monolith, three topologies' },
  cost: { file: 'cost-bench.ts', what: 'CPU per card authorization, process by process' },
  'card-auth': { file: 'card-auth-bench.ts', what: 'the highest card rate this machine sustains within the SLA' },
  gateway: { file: 'gateway-bench.ts', what: 'the latency the gateway adds over calling the lane directly' },
  burst: { file: 'burst-bench.ts', what: 'the shed paths in a burst, with the tax provider at 8 s' },
  floor: { file: 'floor-bench.ts', what: 'a shed answer with nothing of the fleet in the way, the machine\'s floor' },
  fairness: { file: 'fairness-bench.ts', what: 'one merchant\'s flash sale beside quiet merchants, FIFO and fair' },
  memory: { file: 'idle-memory.ts', what: 'the fleet\'s memory at idle' },
  transport: { file: 'transport-bench.ts', what: 'one bare HTTP hop\'s CPU, the floor under the gateway hop' },
  authorize: { file: 'authorize-bench.ts', what: 'card_auth.authorize_batch alone, PostgreSQL\'s cost per authorization' },
  queue: { file: 'queue-bench.ts', what: 'the job queue\'s throughput (--peers: pg-boss and graphile-worker beside it)' },
  'slow-start': { file: 'slow-start-bench.ts', what: 'a new card-auth replica under load against the steady state' },
}

const [name, ...flags] = process.argv.slice(2)
const bench = BENCHES[name]
if (!bench) {
  const width = Math.max(...Object.keys(BENCHES).map(n => n.length))
  const list = Object.entries(BENCHES).map(([n, b]) => `  ${n.padEnd(width)}  ${b.what}`).join('\n')
  const out = name ? process.stderr : process.stdout
  out.write(`${name ? `no benchmark named "${name}"` : 'name a benchmark'}: npm run bench -- <name> [flags]\n${list}\n`)
  process.exit(name ? 2 : 0)
}
const child = spawn(
  process.execPath,
  [...(bench.node ?? []), '--import', 'tsx', path.join(import.meta.dirname, bench.file), ...flags],
  { stdio: 'inherit' }
)
// Ctrl-C reaches the child through the terminal's process group; a signal sent
// to this process alone (a process manager, a test) is passed on.
for (const sig of ['SIGTERM', 'SIGHUP']) process.on(sig, () => child.kill(sig))
process.on('SIGINT', () => {})
child.on('exit', (code, signal) => { process.exitCode = code ?? (signal ? 128 : 1) })
