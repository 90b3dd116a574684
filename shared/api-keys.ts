// Client API keys. Only a SHA-256 of each key is stored (keys are 256-bit
// random, so a plain hash is enough: nothing to brute-force), with the client id
// used for rate limits and logs. The file is written atomically (rename) with
// mode 0644: it holds no secret (a hash of a 256-bit key cannot be turned back
// into it), and the gateway in a container runs as another user than whoever
// ran `npm run keys` on the host.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'

export interface ApiKeyRecord { clientId: string, hash: string, createdAt: string, revokedAt?: string }
export interface ApiKeyFile { keys: ApiKeyRecord[] }

export const hashKey = (key: string): string => crypto.hash('sha256', key, 'hex')

export function readKeyFile (file: string): ApiKeyFile {
  if (!fs.existsSync(file)) return { keys: [] }
  const data = JSON.parse(fs.readFileSync(file, 'utf8')) as ApiKeyFile
  if (!Array.isArray(data.keys)) throw new Error(`${file}: no keys array`)
  return data
}

function writeKeyFile (file: string, data: ApiKeyFile): void {
  fs.mkdirSync(path.dirname(file), { recursive: true })
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, JSON.stringify(data, null, 2), { mode: 0o644 })
  fs.renameSync(tmp, file)
}

/** Create a key for a client; returns the key itself, which is shown once and never stored. */
export function createKey (file: string, clientId: string): string {
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(clientId)) throw new Error('client id: 1-64 of A-Z a-z 0-9 _ . -')
  const key = `wt_${crypto.randomBytes(32).toString('base64url')}`
  const data = readKeyFile(file)
  data.keys.push({ clientId, hash: hashKey(key), createdAt: new Date().toISOString() })
  writeKeyFile(file, data)
  return key
}

/** Revoke every live key of a client; returns how many. */
export function revokeClient (file: string, clientId: string): number {
  const data = readKeyFile(file)
  let n = 0
  for (const k of data.keys) {
    if (k.clientId === clientId && !k.revokedAt) { k.revokedAt = new Date().toISOString(); n++ }
  }
  writeKeyFile(file, data)
  return n
}

/** hash -> client id, live keys only. */
export function keyIndex (data: ApiKeyFile): Map<string, string> {
  return new Map(data.keys.filter(k => !k.revokedAt).map(k => [k.hash, k.clientId]))
}
