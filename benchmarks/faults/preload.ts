// A fault in the tax lane's own code, injected by a benchmark or drill — never a
// branch in production code. Loaded with `node --import <compiled preload>` into
// the one process that runs tax code (the tax lane in the fleet, the whole
// monolith in topologies A and B); everything else gets nothing. It does
// nothing until the control file named by WATERTIGHT_FAULT_FILE (polled every
// 100 ms) says which fault is on. Each process acknowledges the control it has
// applied in `<file>.seen-<pid>`, so a test waits on that, not on a sleep.
//
//   cpu         each tax request spins the CPU for `cpuMs` of CPU time before its handler
//   loop-block  the event loop is stalled for `blockMs` of CPU time every `blockEveryMs`
//   memory      each tax request keeps `retainMb` MB on the JS heap, for good,
//               until the process hits its heap limit (--max-old-space-size) and dies
//   crash       a process started before `since` kills itself with SIGKILL (once:
//               whatever restarts it starts after `since`)
//
// A tax request is a POST /v1/tax/quotes handled by the Fastify app that also
// serves GET /compensation (the tax lane's), found through the tracing channel
// Fastify 5 publishes around every route handler (lib/handle-request.js), so the
// gateway's route of the same path in a monolith is not hit. Compiled on its own
// (benchmarks/faults/control.ts) and loaded without a TypeScript loader, so it
// imports node builtins only.
import diagnostics from 'node:diagnostics_channel'
import fs from 'node:fs'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { FaultControl } from './spec.ts'

const file = process.env.WATERTIGHT_FAULT_FILE
const startedAt = Date.now()
let control: FaultControl = { fault: 'none', since: 0, cpuMs: 20, blockMs: 500, blockEveryMs: 3_000, retainMb: 4 }
let lastBlock = 0
const retained: number[][] = []

function spinCpu (ms: number): void {
  // CPU time, not wall time: the same work however busy the machine is.
  const from = process.cpuUsage()
  while (true) { const d = process.cpuUsage(from); if (d.user + d.system >= ms * 1000) return }
}

function retain (mb: number): void {
  // Plain arrays of doubles live on the V8 heap (a Buffer or typed array would not count against its limit).
  const a: number[] = []
  for (let i = 0; i < mb * 131_072; i++) a.push(i + 0.5)
  retained.push(a)
}

const taxApp = new WeakMap<FastifyInstance, boolean>()
function isTaxRequest (req: FastifyRequest, route: { url?: string, method?: string }): boolean {
  if (route.method !== 'POST' || route.url !== '/v1/tax/quotes') return false
  let yes = taxApp.get(req.server)
  if (yes === undefined) { yes = req.server.hasRoute({ method: 'GET', url: '/compensation' }); taxApp.set(req.server, yes) }
  return yes
}

function apply (): void {
  if (control.fault === 'crash' && startedAt < control.since) process.kill(process.pid, 'SIGKILL')
  if (control.fault === 'loop-block' && Date.now() - lastBlock >= control.blockEveryMs) {
    // A stall is synchronous work: CPU time, so a busy machine stretches it
    // rather than shrinking it to nothing.
    spinCpu(control.blockMs)
    lastBlock = Date.now()
  }
}

if (file) {
  let acked = ''
  // One poll at a time, and the acknowledgement written whole and at once: two
  // asynchronous writes in flight on a busy machine can land out of order, or
  // interleave, leaving an old control acknowledged for good.
  let polling = false
  const seen = `${file}.seen-${process.pid}`
  const read = (): void => {
    if (polling) return
    polling = true
    fs.readFile(file, 'utf8', (err, text) => {
      polling = false
      let fresh = false
      if (!err) {
        try {
          control = { ...control, ...JSON.parse(text) as Partial<FaultControl> }
          fresh = text !== acked
        } catch { /* a half-written file: next poll */ }
      }
      apply()
      if (fresh) {
        try {
          fs.writeFileSync(`${seen}.tmp`, text)
          fs.renameSync(`${seen}.tmp`, seen)
          acked = text
        } catch { /* not acknowledged: the next poll tries again */ }
      }
    })
  }
  read()
  setInterval(read, 100).unref()
  diagnostics.subscribe('tracing:fastify.request.handler:start', message => {
    const m = message as { request: FastifyRequest, route: { url?: string, method?: string } }
    if (control.fault !== 'cpu' && control.fault !== 'memory') return
    if (!isTaxRequest(m.request, m.route)) return
    if (control.fault === 'cpu') spinCpu(control.cpuMs)
    else retain(control.retainMb)
  })
}
