// The image's HEALTHCHECK: GET /health/live of the process this container runs.
// PID 1 is `node dist/services/main.js <process>`, so the process name (and
// from it the port) is read from /proc/1/cmdline; HEALTH_URL overrides.
import fs from 'node:fs'
import { Type } from 'typebox'
import { loadConfig } from '../shared/config.ts'
import { FLEET } from '../shared/fleet.ts'

// Each image process's port variable, default and liveness route, from the
// fleet table (both workers run `worker`: the same variable and default).
const BY_ENTRY = new Map(FLEET.map(p => [p.entry, p]))

function target (): string | undefined {
  const { HEALTH_URL } = loadConfig(Type.Object({ HEALTH_URL: Type.Optional(Type.String({ pattern: '^https?://' })) }), process.env)
  if (HEALTH_URL) return HEALTH_URL
  let args: string[] = []
  try { args = fs.readFileSync('/proc/1/cmdline', 'utf8').split('\0') } catch { /* not in a container */ }
  const name = args[args.findIndex(a => a.endsWith('services/main.js')) + 1] ?? ''
  const p = BY_ENTRY.get(name)
  if (!p) return undefined
  const schema = Type.Object({ [p.portEnv]: Type.Integer({ default: p.port, minimum: 1, maximum: 65535 }) })
  const port = (loadConfig(schema, process.env) as Record<string, number>)[p.portEnv]
  return `http://127.0.0.1:${port}${p.health.live}`
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
