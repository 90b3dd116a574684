// A whole local fleet for benchmarks and drills: `npm start`'s supervisor in its
// own data directory and ports (so it can run beside a developer's fleet),
// optionally pinned to given CPUs with taskset so the load generator does not
// compete with it for a core.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'

export interface LocalFleet {
  gatewayUrl: string
  deckUrl: string
  adminToken: string
  laneUrls: Record<'card-auth' | 'fraud' | 'tax', string>
  sandboxUrl: string
  apiKey: string
  databaseUrl: string
  demoCards: Array<{ token: string, currency: string, available: number }>
  pinned: string | undefined
  /** The supervisor's pid (taskset execs node, so it is the child's). */
  pid: number
  stop (): Promise<void>
}

export const hasTaskset = (): boolean => spawnSync('taskset', ['-V']).status === 0

export async function startLocalFleet (opts: { dataDir: string, basePort: number, cpus?: string, env?: Record<string, string> }): Promise<LocalFleet> {
  const b = opts.basePort
  const ports = { PG_PORT: b + 9, GATEWAY_PORT: b, CARD_AUTH_PORT: b + 1, FRAUD_PORT: b + 2, TAX_PORT: b + 3, TAX_SANDBOX_PORT: b + 5, DECK_PORT: b + 6, WORKER_PORT: b + 7 }
  const env = { ...process.env, DATA_DIR: opts.dataDir, QUIET: 'true', LOG_LEVEL: 'warn', ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])), ...opts.env }
  const pin = opts.cpus && hasTaskset() ? opts.cpus : undefined
  const [cmd, args] = pin
    ? ['taskset', ['-c', pin, process.execPath, '--import', 'tsx', 'services/supervisor/main.ts']]
    : [process.execPath, ['--import', 'tsx', 'services/supervisor/main.ts']]
  const root = path.resolve(import.meta.dirname, '../..')
  const child: ChildProcess = spawn(cmd as string, args as string[], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] })
  const lines: string[] = []
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fleet did not start:\n${lines.join('\n')}`)), 120_000)
    const onLine = (l: string): void => { lines.push(l); if (l.includes('fleet is up')) { clearTimeout(timer); resolve() } }
    readline.createInterface({ input: child.stdout! }).on('line', onLine)
    readline.createInterface({ input: child.stderr! }).on('line', onLine)
    child.once('exit', code => { clearTimeout(timer); reject(new Error(`supervisor exited ${code}:\n${lines.join('\n')}`)) })
  })
  const creds = JSON.parse(fs.readFileSync(path.join(opts.dataDir, 'credentials.json'), 'utf8'))
  return {
    ...creds,
    laneUrls: { 'card-auth': `http://127.0.0.1:${ports.CARD_AUTH_PORT}`, fraud: `http://127.0.0.1:${ports.FRAUD_PORT}`, tax: `http://127.0.0.1:${ports.TAX_PORT}` },
    sandboxUrl: `http://127.0.0.1:${ports.TAX_SANDBOX_PORT}`,
    pinned: pin,
    pid: child.pid!,
    stop: () => new Promise<void>(resolve => {
      if (child.exitCode !== null) return resolve()
      child.once('exit', () => resolve())
      child.kill('SIGTERM')
    }),
  }
}

/** Pin this process to the given CPUs (when taskset exists). */
export function pinSelf (cpus: string): boolean {
  return hasTaskset() && spawnSync('taskset', ['-a', '-cp', cpus, String(process.pid)]).status === 0
}
