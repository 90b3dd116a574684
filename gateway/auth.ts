// Bearer API-key authentication against the hashed key file, re-read when it
// changes so a new or revoked key takes effect without a restart.
import fs from 'node:fs'
import type { FastifyRequest } from 'fastify'
import { AppError } from '../shared/errors.ts'
import { hashKey, keyIndex, readKeyFile } from '../shared/api-keys.ts'

export interface KeySource {
  lookup (hash: string): string | undefined
  /** Why the file could not be read (the gateway is then not ready), or undefined. */
  problem (): string | undefined
  close (): void
}

export type KeyLog = (problem: string) => void

// What identifies one version of the file. The inode is part of it: `npm run
// keys` replaces the file by rename, and a rename within the same millisecond
// (or onto a file with a later mtime) would otherwise go unseen.
const versionOf = (file: string): string => {
  const s = fs.statSync(file, { throwIfNoEntry: false })
  return s ? `${s.ino}:${s.mtimeMs}:${s.size}` : 'none'
}

/**
 * Keys from `file`, checked every `reloadMs`. A file that cannot be read (not
 * readable by this user, not JSON) does not stop the gateway: it keeps the
 * last good keys (none at start), reports the problem once through `log` and
 * on /health/ready, and reads the file again at the next check, so fixing the
 * file fixes the gateway.
 */
export function fileKeySource (file: string, log: KeyLog = () => {}, reloadMs = 2_000): KeySource {
  let index = new Map<string, string>()
  let seen: string | undefined
  let problem: string | undefined
  const load = (): void => {
    try {
      const version = versionOf(file)
      if (version === seen && problem === undefined) return
      index = keyIndex(readKeyFile(file))
      seen = version
      problem = undefined
    } catch (err) {
      const p = keyFileProblem(file, err as NodeJS.ErrnoException)
      if (p !== problem) log(p)
      problem = p
    }
  }
  load()
  const timer = setInterval(load, reloadMs)
  timer.unref()
  return { lookup: h => index.get(h), problem: () => problem, close: () => clearInterval(timer) }
}

function keyFileProblem (file: string, err: NodeJS.ErrnoException): string {
  if (err.code === 'EACCES') return `API_KEYS_FILE ${file} is not readable by uid ${process.getuid?.() ?? '?'}: make it readable (it holds only key hashes; npm run keys writes it 0644)`
  if (err.code === 'EISDIR') return `API_KEYS_FILE ${file} is a directory: point it at the key file`
  return `API_KEYS_FILE ${file} cannot be read (${err.code ?? err.message}): write it with npm run keys`
}

export function authenticate (req: FastifyRequest, keys: KeySource): string {
  const h = req.headers.authorization
  const m = typeof h === 'string' ? /^Bearer ([A-Za-z0-9_\-.~+/]{16,256}=*)$/.exec(h) : null
  const clientId = m ? keys.lookup(hashKey(m[1]!)) : undefined
  if (!clientId) throw new AppError('ERR_UNAUTHENTICATED', { detail: 'Authorization: Bearer <api key> is missing or not a live key', headers: { 'www-authenticate': 'Bearer realm="watertight"' } })
  return clientId
}
