// Bearer API-key authentication against the hashed key file, reloaded when it
// changes so a revoked key stops working without a restart.
import fs from 'node:fs'
import type { FastifyRequest } from 'fastify'
import { AppError } from '../shared/errors.ts'
import { hashKey, keyIndex, readKeyFile } from '../shared/api-keys.ts'

export interface KeySource { lookup (hash: string): string | undefined, close (): void }

export function fileKeySource (file: string, reloadMs = 2_000): KeySource {
  let index = keyIndex(readKeyFile(file))
  let mtime = fs.existsSync(file) ? fs.statSync(file).mtimeMs : 0
  const timer = setInterval(() => {
    try {
      const m = fs.existsSync(file) ? fs.statSync(file).mtimeMs : 0
      if (m !== mtime) { index = keyIndex(readKeyFile(file)); mtime = m }
    } catch { /* keep the last good index */ }
  }, reloadMs)
  timer.unref()
  return { lookup: h => index.get(h), close: () => clearInterval(timer) }
}

export function authenticate (req: FastifyRequest, keys: KeySource): string {
  const h = req.headers.authorization
  const m = typeof h === 'string' ? /^Bearer ([A-Za-z0-9_\-.~+/]{16,256}=*)$/.exec(h) : null
  const clientId = m ? keys.lookup(hashKey(m[1]!)) : undefined
  if (!clientId) throw new AppError('ERR_UNAUTHENTICATED', { detail: 'Authorization: Bearer <api key> is missing or not a live key', headers: { 'www-authenticate': 'Bearer realm="watertight"' } })
  return clientId
}
