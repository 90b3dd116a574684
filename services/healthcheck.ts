// The image's HEALTHCHECK: GET /health/live of the process this container runs.
// PID 1 is `node dist/services/main.js <process>`, so the process name (and
// from it the port) is read from /proc/1/cmdline; HEALTH_URL overrides.
import fs from 'node:fs'
import { LANE_DEFAULTS, LANE_NAMES, envPrefix } from '../shared/lanes.ts'

// Each process's port variable and default (the lanes' from the lane table).
const PORTS: Record<string, [string, number]> = {
  gateway: ['GATEWAY_PORT', 8080],
  ...Object.fromEntries(LANE_NAMES.map(n => [n, [`${envPrefix(n)}PORT`, LANE_DEFAULTS[n].port]])),
  worker: ['WORKER_PORT', 8104],
  deck: ['DECK_PORT', 9090],
  'tax-sandbox': ['TAX_SANDBOX_PORT', 8190],
}

function target (): string | undefined {
  if (process.env.HEALTH_URL) return process.env.HEALTH_URL
  let args: string[] = []
  try { args = fs.readFileSync('/proc/1/cmdline', 'utf8').split('\0') } catch { /* not in a container */ }
  const name = args[args.findIndex(a => a.endsWith('services/main.js')) + 1] ?? ''
  const port = PORTS[name]
  if (!port) return undefined
  return `http://127.0.0.1:${process.env[port[0]] || port[1]}/health/live`
}

const url = target()
if (!url) {
  // A one-shot job (migrate, tax-certify) has no health route: healthy while it runs.
  process.exit(0)
}
try {
  const res = await fetch(url, { signal: AbortSignal.timeout(2_000) })
  process.exit(res.ok ? 0 : 1)
} catch {
  process.exit(1)
}
