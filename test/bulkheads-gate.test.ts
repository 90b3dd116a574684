// The isolation gate (ADV-FD-01): `npm run lint:bulkheads` passes on the repo
// and fails on a deliberately bad tree with ERR_SHARED_FAILURE_DOMAIN_DETECTED,
// naming each offending file.
import { execFile } from 'node:child_process'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { ROOT, TS_LOADER } from './helpers/procs.ts'

const run = (dir?: string) => promisify(execFile)(process.execPath, [...TS_LOADER, '.ci/bulkheads/gate.ts', ...(dir ? [dir] : [])], { cwd: ROOT })
  .then(
    r => ({ code: 0, out: r.stdout + r.stderr }),
    (e: { code: number, stdout: string, stderr: string }) => ({ code: e.code, out: e.stdout + e.stderr }))

t.test('the fleet passes the gate', async t => {
  const r = await run()
  t.equal(r.code, 0, r.out)
  t.match(r.out, /no shared failure domain/)
})

t.test('a bad tree fails it, with the code and the offending file for each rule', async t => {
  const r = await run(path.join(ROOT, 'test/fixtures/bulkheads-bad'))
  t.equal(r.code, 1, 'non-zero exit')
  const lines = r.out.split('\n').filter(l => l.startsWith('ERR_SHARED_FAILURE_DOMAIN_DETECTED '))
  const expected: Array<[string, RegExp]> = [
    ['a lane importing another lane', /lane-imports-lane: services\/fraud\/peek\.ts -> services\/tax\/rates\.ts/],
    ['a lane importing from the worker\'s folder (no exception for job types)', /lane-imports-process: services\/fraud\/jobs\.ts -> services\/worker\/job-types\.ts/],
    ['the supervisor importing the gateway\'s code', /process-imports-process: services\/supervisor\/keys\.ts -> gateway\/api-keys\.ts/],
    ['shared code importing a process', /shared-imports-process: shared\/util\.ts -> services\/fraud\/peek\.ts/],
    ['a pg pool made outside shared/db', /pool-outside-kit: services\/tax\/rates\.ts -> .*node_modules\/pg\//],
    ['undici used outside the kit (global dispatcher)', /agent-outside-kit: services\/card-auth\/client\.ts -> .*node_modules\/undici\//],
    ['a process entry imported', /entry-imported: services\/card-auth\/uses-main\.ts -> services\/tax\/main\.ts/],
    ['a module-level pool', /module-level-pool: services\/tax\/rates\.ts:4/],
    ['a lazily made module-level agent', /module-level-pool: services\/card-auth\/client\.ts:7/],
  ]
  for (const [what, re] of expected) t.ok(lines.some(l => re.test(l)), what)
  t.notOk(lines.some(l => l.includes('services/tax/main.ts:')), 'module-level state in a process entry is allowed')
})
