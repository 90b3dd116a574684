// tap `after`: stop the test run's PostgreSQL and wait until it is gone.
import fs from 'node:fs'
import path from 'node:path'
import { DIST_DIR, STATE_FILE } from './state.ts'

if (fs.existsSync(STATE_FILE)) {
  const { pid } = JSON.parse(fs.readFileSync(STATE_FILE, 'utf8')) as { pid: number }
  try { process.kill(pid, 'SIGTERM') } catch { /* already gone */ }
  const until = Date.now() + 20_000
  while (Date.now() < until) {
    try { process.kill(pid, 0) } catch { break }
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}
fs.rmSync(path.dirname(DIST_DIR), { recursive: true, force: true })
