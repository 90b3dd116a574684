// The container image's entry: `node dist/services/main.js <process>` runs one
// process of the fleet, so one image serves every Deployment and compose
// service. Modules load with the running file's extension: .ts under tsx, .js
// once compiled.
import path from 'node:path'
import { idleTrimMs, startIdleTrim } from '../shared/idle-trim.ts'
import { watchParent } from '../shared/lifecycle.ts'
import { failStart } from '../shared/start-failure.ts'

// Before anything else: a process whose supervisor is gone must not go on starting.
watchParent()

const here = import.meta.dirname
const ext = path.extname(import.meta.filename)
export const PROCESSES: Readonly<Record<string, string>> = Object.freeze({
  gateway: '../gateway/main',
  'card-auth': './card-auth/main',
  fraud: './fraud/main',
  tax: './tax/main',
  worker: './worker/main',
  deck: './deck/main',
  'tax-sandbox': './tax-sandbox/main',
  // One-shot jobs: migrations and roles, tax certification, API keys, card accounts.
  migrate: '../shared/db/migrate-cli',
  'seed-cards': './card-auth/seed-cli',
  'tax-certify': './tax/compensation/certify-cli',
  keys: '../gateway/keys-cli',
  healthcheck: './healthcheck',
})

const LONG_RUNNING = new Set(['gateway', 'card-auth', 'fraud', 'tax', 'worker', 'deck', 'tax-sandbox'])

const name = process.argv[2] ?? ''
const target = PROCESSES[name]
if (!target) {
  console.error(`usage: main.js <${Object.keys(PROCESSES).join('|')}> [args...]`)
  process.exit(2)
}
async function start (): Promise<void> {
  // The processes that stay up give back at idle what start-up and load grew their heap to.
  // A bad IDLE_TRIM_SECONDS stops the process here with ERR_CONFIG_INVALID, as any setting does.
  if (LONG_RUNNING.has(name)) startIdleTrim({ idleMs: idleTrimMs(process.env) })
  // The chosen module reads its own arguments after the process name.
  process.argv.splice(2, 1)
  // Resolves once the process is up: each entry starts with top-level awaits.
  await import(path.join(here, target + ext))
}

// A process that stays up and fails to start ends with one line saying what went
// wrong and what to do (shared/start-failure.ts), not a stack trace that its
// restart policy repeats. One-shot commands keep their own exit codes.
if (LONG_RUNNING.has(name)) await start().catch((err: unknown) => failStart(name, err))
else await start()
