// Memory given back at idle (shared/idle-trim.ts): a fleet process whose young
// generation grew while it started gives it back once its event loop has been
// idle for IDLE_TRIM_SECONDS, and one with the check off keeps it; a busy loop
// is never interrupted by the collection; a bad setting stops the process.
import v8 from 'node:v8'
import t from 'tap'
import { idleTrimMs, startIdleTrim } from '../shared/idle-trim.ts'
import { call, eventually } from './helpers/http.ts'
import { startProcess } from './helpers/procs.ts'

const MB = 1024 * 1024
const newSpaceMb = (): number => (v8.getHeapSpaceStatistics().find(s => s.space_name === 'new_space')?.space_size ?? 0) / MB

/** A process's young generation, committed, from its prom-client default metrics. */
async function remoteNewSpaceMb (url: string): Promise<number> {
  const text = (await call(url + '/metrics')).body as string
  const m = /^nodejs_heap_space_size_total_bytes\{space="new"[^}]*\} (\d+)/m.exec(text)
  if (!m) throw new Error('no new-space size in /metrics')
  return Number(m[1]) / MB
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
  const trims: Array<{ newSpaceBeforeMb: number, newSpaceAfterMb: number }> = []
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
  t.equal(trims.at(-1), shrank, 'and no collection after the one that shrank it')
})

t.test('IDLE_TRIM_SECONDS 0: nothing runs', async t => {
  let trims = 0
  const stop = startIdleTrim({ idleMs: 0, onTrim: () => { trims++ } })
  stop()
  t.equal(trims, 0)
})

t.test('a fleet process (the tax sandbox, started as npm start starts it) gives its young generation back at idle; with the check off it keeps it', async t => {
  const env = { TAX_SANDBOX_PORT: '0' }
  const [on, off] = await Promise.all([
    startProcess(t, 'sandbox-trim-on', 'services/main.ts', { ...env, IDLE_TRIM_SECONDS: '1' }, { args: ['tax-sandbox'] }),
    startProcess(t, 'sandbox-trim-off', 'services/main.ts', { ...env, IDLE_TRIM_SECONDS: '0' }, { args: ['tax-sandbox'] }),
  ])
  const offAtStart = await remoteNewSpaceMb(off.url)
  t.ok(offAtStart > 4, `start-up grew the young generation past its initial size (${offAtStart} MB)`)
  // Read once a second: each read is work for the process, and the check wants a loop idle for a whole window.
  const shrunk = await eventually(async () => { const mb = await remoteNewSpaceMb(on.url); return mb <= 4 ? mb : undefined }, 60_000, 1_000)
  t.ok(shrunk !== undefined, `with IDLE_TRIM_SECONDS=1 it shrank to ${shrunk} MB`)
  const offNow = await remoteNewSpaceMb(off.url)
  t.ok(offNow > 4, `with IDLE_TRIM_SECONDS=0 it kept ${offNow} MB over the same time`)
})

t.test('a bad IDLE_TRIM_SECONDS stops the process at boot', async t => {
  const err = await startProcess(t, 'sandbox-bad-trim', 'services/main.ts', { TAX_SANDBOX_PORT: '0', IDLE_TRIM_SECONDS: 'soon' }, { args: ['tax-sandbox'] }).then(() => undefined, (e: Error) => e)
  t.match(err?.message, /exited with 1[\s\S]*ERR_CONFIG_INVALID[\s\S]*IDLE_TRIM_SECONDS/)
})
