// Logs a person can read: LOG_FORMAT=pretty (what `npm start` sets for its
// children on a terminal) writes pino-pretty lines; without it a process writes
// one JSON object per line, as tests, pipes and containers need; a bad value
// stops the process at boot with ERR_CONFIG_INVALID.
import t, { type Test } from 'tap'
import { call, eventually } from './helpers/http.ts'
import { startProcess } from './helpers/procs.ts'

const SANDBOX = 'services/tax-sandbox/main.ts'
const isJson = (line: string): boolean => { try { return typeof JSON.parse(line) === 'object' } catch { return false } }

// A line at info (listening), one at debug (a request), and the shutdown.
async function linesOf (t: Test, env: Record<string, string>): Promise<string[]> {
  const p = await startProcess(t, 'tax-sandbox', SANDBOX, { TAX_SANDBOX_PORT: '0', LOG_LEVEL: 'debug', ...env })
  t.equal((await call(p.url + '/faults')).status, 200)
  t.ok(await eventually(async () => p.log.some(l => l.includes('/faults')), 5_000, 20), 'the request was logged')
  await p.kill()
  return p.log.filter(l => l.trim() !== '')
}

t.test('without LOG_FORMAT: one JSON object per line, named after the process', async t => {
  const lines = await linesOf(t, {})
  t.ok(lines.length >= 2, `${lines.length} lines`)
  t.same(lines.filter(l => !isJson(l)), [], 'every line is JSON')
  t.ok(lines.map(l => JSON.parse(l) as { name?: string }).every(o => o.name === 'tax-sandbox'))
})

t.test('LOG_FORMAT=pretty: human-readable lines, no JSON', async t => {
  const lines = await linesOf(t, { LOG_FORMAT: 'pretty' })
  t.ok(lines.length >= 2, `${lines.length} lines`)
  t.same(lines.filter(isJson), [], 'no line is JSON')
  const listening = lines.find(l => l.includes('Server listening at'))
  t.match(listening, /INFO.*\(tax-sandbox\).*Server listening at http:\/\/127\.0\.0\.1:\d+/, 'level, process name and message on one line')
  t.match(lines.find(l => l.includes('/faults')), /DEBUG.*request/, 'the request line at debug')
})

t.test('a LOG_FORMAT the schema does not know stops the process at boot', async t => {
  const err = await startProcess(t, 'tax-sandbox', SANDBOX, { TAX_SANDBOX_PORT: '0', LOG_FORMAT: 'colourful' }).then(() => undefined, (e: Error) => e)
  t.match(err?.message, /exited with 1[\s\S]*ERR_CONFIG_INVALID[\s\S]*LOG_FORMAT/)
})
