// `npm run lint:bulkheads [dir]`: the isolation gate (ADV-FD-01). Import rules
// with dependency-cruiser, module-level pools and agents with ESLint; every
// finding is printed as ERR_SHARED_FAILURE_DOMAIN_DETECTED with the file, and
// any finding fails the run. `dir` (default: the repo) lets a test point the gate
// at a deliberately bad fixture.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { ESLint } from 'eslint'

const CODE = 'ERR_SHARED_FAILURE_DOMAIN_DETECTED'
const here = import.meta.dirname
const repo = path.resolve(here, '../..')
const root = path.resolve(process.argv[2] ?? repo)
const dirs = ['services', 'gateway', 'shared'].filter(d => fs.existsSync(path.join(root, d)))
const findings: string[] = []

interface Cruise {
  summary: { violations: Array<{ from: string, to: string, rule: { name: string } }>, totalCruised: number }
}
const depcruise = path.join(repo, 'node_modules/.bin/depcruise')
const { stdout } = await promisify(execFile)(depcruise, ['--config', path.join(here, 'dependency-cruiser.cjs'), '--output-type', 'json', ...dirs], { cwd: root, maxBuffer: 64 * 1024 * 1024 })
  .catch((err: { stdout?: string, stderr?: string }) => {
    // depcruise exits non-zero when it finds violations; its JSON is still on stdout.
    if (err.stdout) return { stdout: err.stdout }
    throw new Error(`dependency-cruiser failed: ${err.stderr ?? String(err)}`)
  })
const cruise = JSON.parse(stdout) as Cruise
for (const v of cruise.summary.violations) findings.push(`${CODE} ${v.rule.name.replace(`${CODE}:`, '')}: ${v.from} -> ${v.to}`)

const eslint = new ESLint({ cwd: root, overrideConfigFile: path.join(here, 'eslint.config.js'), errorOnUnmatchedPattern: false })
for (const r of await eslint.lintFiles(dirs)) {
  for (const m of r.messages) findings.push(`${CODE} module-level-pool: ${path.relative(root, r.filePath)}:${m.line}:${m.column} ${m.ruleId === 'no-restricted-syntax' ? '' : `(${m.message}) `}`.trimEnd())
}

if (findings.length > 0) {
  for (const f of findings) console.error(f)
  console.error(`lint:bulkheads: ${findings.length} finding(s) in ${root}`)
  process.exit(1)
}
console.log(`lint:bulkheads: no shared failure domain (${cruise.summary.totalCruised} modules cruised, ${dirs.join(', ')})`)
