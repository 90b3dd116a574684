// Memory given back at idle (shared/idle-trim.ts): a fleet process whose young
// generation grew while it started gives it back once its event loop has been
// idle for IDLE_TRIM_SECONDS, and one with the check off keeps it; a busy loop
// is never interrupted by the collection; a bad setting stops the process.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import v8 from 'node:v8'
import t from 'tap'
import { idleTrimMs, startIdleTrim } from '../shared/idle-trim.ts'
import { call, eventually } from './helpers/http.ts'
import { ROOT, startProcess, TS_LOADER } from './helpers/procs.ts'

const run = promisify(execFile)

const MB = 1024 * 1024
const newSpaceMb = (): number => (v8.getHeapSpaceStatistics().find(s => s.space_name === 'new_space')?.space_size ?? 0) / MB

/** A process's young generation, committed, and the idle check's collections, from its /metrics. */
async function remote (url: string): Promise<{ newSpaceMb: number, collections: number }> {
  const text = (await call(url + '/metrics')).body as string
  const m = /^nodejs_heap_space_size_total_bytes\{space="new"[^}]*\} (\d+)/m.exec(text)
  const c = /^idle_trim_collections_total\{[^}]*\} (\d+)/m.exec(text)
  if (!m || !c) throw new Error('no new-space size or idle_trim_collections_total in /metrics')
  return { newSpaceMb: Number(m[1]) / MB, collections: Number(c[1]) }
}

/** Allocation that survives a few scavenges, the pattern that makes V8 grow its semi-spaces. */
function growYoungGeneration (): void {
  let keep: object[] = []
  for (let i = 0; i < 400_000; i++) {
    keep.push({ i, s: 'x' + i })
    if (keep.length > 50_000) keep = keep.slice(25_000)
  }
}

t.test('IDLE_TRIM_SECONDS: 10 by default, 0 turns it off; a negative, a word or more than an hour stops the process', async t => {
  t.equal(idleTrimMs({}), 10_000)
  t.equal(idleTrimMs({ IDLE_TRIM_SECONDS: '' }), 10_000)
  t.equal(idleTrimMs({ IDLE_TRIM_SECONDS: '0' }), 0)
  t.equal(idleTrimMs({ IDLE_TRIM_SECONDS: '3600' }), 3_600_000)
  for (const bad of ['-1', 'ten', '3601']) t.throws(() => idleTrimMs({ IDLE_TRIM_SECONDS: bad }), { code: 'ERR_CONFIG_INVALID' }, JSON.stringify(bad))
})

t.test('in this process: no collection while the loop is busy; once it is idle, collections until the young generation shrinks', async t => {
  growYoungGeneration()
  const grown = newSpaceMb()
  const trims: Array<{
    newSpaceBeforeMb: number
    newSpaceAfterMb: number
    heapTotalBeforeMb: number
    heapTotalAfterMb: number
    heapUsedBeforeMb: number
  }> = []
  const stop = startIdleTrim({ idleMs: 200, onTrim: x => trims.push(x) })
  t.teardown(stop)
  // Busy: every turn of the loop runs ~5 ms of work for a second, over five idle windows.
  const until = Date.now() + 1_000
  await new Promise<void>(resolve => {
    const spin = (): void => {
      const end = Date.now() + 5
      while (Date.now() < end); // busy
      if (Date.now() < until) setImmediate(spin)
      else resolve()
    }
    spin()
  })
  t.equal(trims.length, 0, 'no collection while the event loop was busy')
  // V8 shrinks only at a low allocation rate, measured over its last few seconds; a
  // collection that gave nothing back is tried again after twice the wait.
  const shrank = await eventually(async () => trims.find(x => x.newSpaceAfterMb < x.newSpaceBeforeMb), 30_000, 50)
  t.ok(shrank, `the young generation shrank once idle: ${JSON.stringify(trims)} (grown to ${grown} MB)`)
  // After it, only collections that made the heap's committed size smaller, while it held 8 MB more than it used:
  // read once a whole second (five idle windows) went by without one.
  let seen = -1
  await eventually(async () => {
    const quiet = trims.length === seen
    seen = trims.length
    return quiet || undefined
  }, 30_000, 1_000)
  const after = trims.slice(trims.indexOf(shrank!) + 1)
  const smaller = (x: typeof after[number], i: number): boolean =>
    x.heapTotalAfterMb < (i === 0 ? shrank!.heapTotalAfterMb : after[i - 1]!.heapTotalAfterMb) &&
    x.heapTotalBeforeMb - x.heapUsedBeforeMb >= 8
  t.ok(after.every(smaller),
    `and after it only collections that made the heap smaller: ${JSON.stringify(after.map(x => x.heapTotalAfterMb))}`)
})

t.test('the idle collection collects the old generation too: what a load left there is freed', async t => {
  // Run alone, so no other code's allocation decides what the collection finds.
  const r = await run(process.execPath, ['--expose-gc', ...TS_LOADER, 'test/fixtures/idle-trim-old.ts'], { cwd: ROOT })
  type Trim = { heapUsedBeforeMb: number, heapUsedAfterMb: number, heapTotalBeforeMb: number, heapTotalAfterMb: number }
  const x = JSON.parse(r.stdout) as { usedBeforeMb: number, live: number, trims: Trim[] }
  t.equal(x.live, 40_000, 'the objects still referenced are kept')
  const first = x.trims[0]!
  t.ok(x.usedBeforeMb - first.heapUsedAfterMb > 20, `the 360,000 dropped ones are freed by the first collection: heap used ${x.usedBeforeMb.toFixed(1)} -> ${first.heapUsedAfterMb.toFixed(1)} MB`)
  // A full collection compacts part of what it emptied; the ones after it at idle give the rest back.
  const lastTotal = x.trims.at(-1)!.heapTotalAfterMb
  t.ok(first.heapTotalAfterMb - lastTotal > 20, `the heap's committed size: ${first.heapTotalBeforeMb.toFixed(1)} MB, ${first.heapTotalAfterMb.toFixed(1)} after the first collection, ${lastTotal.toFixed(1)} after the last of ${x.trims.length}`)
  t.ok(lastTotal - x.trims.at(-1)!.heapUsedAfterMb < 8, 'the collections stop once it commits less than 8 MB over what it uses')
})

t.test('a process started without --expose-gc says so in one line and trims nothing', async t => {
  const script = "import { startIdleTrim } from './shared/idle-trim.ts'; startIdleTrim({ idleMs: 100 })"
  const r = await run(process.execPath, [...TS_LOADER, '--input-type=module', '-e', script], { cwd: ROOT })
  const lines = r.stderr.trim().split('\n')
  t.equal(lines.length, 1, 'one line')
  t.match(JSON.parse(lines[0]!), { level: 'warn', msg: /--expose-gc.*IDLE_TRIM_SECONDS=0/ }, 'naming the flag, and the setting that silences it')
})

t.test('IDLE_TRIM_SECONDS 0: nothing runs', async t => {
  let trims = 0
  const stop = startIdleTrim({ idleMs: 0, onTrim: () => { trims++ } })
  stop()
  t.equal(trims, 0)
})

t.test('a fleet process (the tax sandbox, started as npm start starts it) gives its young generation back at idle; with the check off it runs no collection', async t => {
  const env = { TAX_SANDBOX_PORT: '0' }
  const [on, off] = await Promise.all([
    startProcess(t, 'sandbox-trim-on', 'services/main.ts', { ...env, IDLE_TRIM_SECONDS: '1' }, { args: ['tax-sandbox'] }),
    startProcess(t, 'sandbox-trim-off', 'services/main.ts', { ...env, IDLE_TRIM_SECONDS: '0' }, { args: ['tax-sandbox'] }),
  ])
  const offAtStart = await remote(off.url)
  t.ok(offAtStart.newSpaceMb > 4, `start-up grew the young generation past its initial size (${offAtStart.newSpaceMb} MB)`)
  // Read once a second: each read is work for the process, and the check wants a loop idle for a whole window.
  const shrunk = await eventually(async () => {
    const r = await remote(on.url)
    return r.newSpaceMb <= 4 ? r : undefined
  }, 60_000, 1_000)
  t.ok(shrunk !== undefined, `with IDLE_TRIM_SECONDS=1 it shrank to ${shrunk?.newSpaceMb} MB`)
  t.ok((shrunk?.collections ?? 0) >= 1, `by the idle check's collections (${shrunk?.collections})`)
  // Whether V8's own memory reducer shrinks an idle process too is V8's choice and varies
  // from run to run (docs/benchmarks.md, "Memory at idle"); what the setting decides is
  // whether the check collects, so that is what the control reads.
  const offNow = await remote(off.url)
  t.equal(offNow.collections, 0, `with IDLE_TRIM_SECONDS=0 the check ran no collection (young generation ${offNow.newSpaceMb} MB)`)
})

t.test('a bad IDLE_TRIM_SECONDS stops the process at boot', async t => {
  const err = await startProcess(t, 'sandbox-bad-trim', 'services/main.ts', { TAX_SANDBOX_PORT: '0', IDLE_TRIM_SECONDS: 'soon' }, { args: ['tax-sandbox'] }).then(() => undefined, (e: Error) => e)
  t.match(err?.message, /exited with 1[\s\S]*ERR_CONFIG_INVALID[\s\S]*IDLE_TRIM_SECONDS/)
})
