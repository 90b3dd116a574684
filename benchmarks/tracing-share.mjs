// Tracing's own share of each profiled process's CPU:
//   node benchmarks/tracing-share.mjs <dir of .cpuprofile files>
// (the profiles from `npm run bench -- cost --tracing --cpu-prof-dir <dir>`).
// A sample counts as tracing's when the nearest frame of the fleet's own code
// (Node's internals and V8's builtins skipped) is in tracing.ts's chunk or the
// SDK's: work a hook hands on to the rest of the request is not counted.
// Inside one process the share does not depend on how fast that process
// happens to run, which two alike processes differ in by several percent.
import fs from 'node:fs'
import path from 'node:path'

const [dir] = process.argv.slice(2)
if (!dir) { console.error('usage: node benchmarks/tracing-share.mjs <profile dir>'); process.exit(2) }
// tracing.ts's chunk: the file its helpers' frames name (a bundle's chunk names change with every build).
const TRACING_FNS = new Set(['requestTrace', 'parseTraceparent', 'exactTraceparent', 'traceOf', 'openSpan', 'clientSpan', 'startTracing'])
for (const file of fs.readdirSync(dir).filter(f => f.endsWith('.cpuprofile')).sort()) {
  const p = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'))
  const byId = new Map(p.nodes.map(n => [n.id, n]))
  const ours = new Set(p.nodes.filter(n => TRACING_FNS.has(n.callFrame.functionName)).map(n => n.callFrame.url))
  const parent = new Map()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const counts = new Map()
  for (const s of p.samples) counts.set(s, (counts.get(s) ?? 0) + 1)
  let total = 0
  let tracing = 0
  const by = new Map()
  for (const [id, c] of counts) {
    if (byId.get(id).callFrame.functionName === '(idle)') continue
    total += c
    for (let x = id; x !== undefined; x = parent.get(x)) {
      const f = byId.get(x).callFrame
      if (f.url === '' || f.url.startsWith('node:')) continue
      if (ours.has(f.url) || f.url.includes('tracing-sdk')) {
        tracing += c
        const k = `${f.functionName || '(anonymous)'}`
        by.set(k, (by.get(k) ?? 0) + c)
      }
      break
    }
  }
  const top = [...by].sort((a, b) => b[1] - a[1]).slice(0, 6).map(([k, v]) => `${k} ${v}`).join(', ')
  console.log(`${file}: ${tracing} of ${total} samples tracing's own (${(100 * tracing / total).toFixed(2)}%)${top ? `; most: ${top}` : ''}`)
}
