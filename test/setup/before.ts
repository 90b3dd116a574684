// tap `before`: compile the fleet for the run, start the test run's PostgreSQL
// (detached) and wait until its template database is migrated.
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import { buildFleet } from '../../services/supervisor/build.ts'
import { NO_COVERAGE, TS_LOADER } from '../helpers/procs.ts'
import { DIST_DIR, RUN_ID, STATE_FILE } from './state.ts'

fs.rmSync(STATE_FILE, { force: true })
// With the supervisor: the drill's fleet runs it compiled, as `npm start` does.
const built = buildFleet(DIST_DIR, { withSupervisor: true }).then(() => undefined, (err: Error) => err)
const child = spawn(process.execPath, [...TS_LOADER, 'test/setup/pg-daemon.ts'], {
  detached: true,
  // The server process is not measured (see test/helpers/procs.ts).
  env: { ...process.env, ...NO_COVERAGE, WT_TEST_RUNNER_PID: RUN_ID },
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
})
await new Promise<void>((resolve, reject) => {
  const t = setTimeout(() => reject(new Error('test PostgreSQL did not start in 60 s')), 60_000)
  child.once('message', () => { clearTimeout(t); resolve() })
  // It has said why on stderr: exit with its code, no stack trace of ours on top.
  child.once('exit', code => { clearTimeout(t); process.exit(code || 1) })
})
child.disconnect()
child.unref()
const buildError = await built
if (buildError) throw buildError
