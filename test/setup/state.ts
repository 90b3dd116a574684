import path from 'node:path'
import { dbRoles } from '../../shared/lanes.ts'

// One tap run = one runner process, the parent of `before`, every test file and
// `after`: its pid keys the run's state, so two runs in one checkout never
// share (or stop) each other's server.
export const RUN_ID = process.env.WT_TEST_RUNNER_PID ?? String(process.ppid)
export const STATE_FILE = path.resolve(`.data/test-pg-state-${RUN_ID}.json`)
export const DATA_DIR = path.resolve(`.data/test-pg-${RUN_ID}`)
// The fleet compiled once for the run (as npm start does): every process a test starts runs from it.
export const DIST_DIR = path.resolve(`.data/test-run-${RUN_ID}/dist`) // a `dist` folder: tap leaves it out of coverage
export const TEMPLATE_DB = 'wt_template'
export const TEMPLATE_ROLE_PREFIX = 'tpl_'

export function templatePasswords (): Record<string, string> {
  return Object.fromEntries(dbRoles({ ROLE_PREFIX: TEMPLATE_ROLE_PREFIX }).map(r => [r.role, 'template-only']))
}
