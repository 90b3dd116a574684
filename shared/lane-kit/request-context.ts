// What a lane reads from a request the gateway forwarded: the authenticated
// client (X-Client-Id, set by the gateway after authentication) and the
// Idempotency-Key. Lanes listen on loopback or a private network only.
import crypto from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { AppError } from '../errors.ts'

const KEY = /^[\x21-\x7e]{1,255}$/

export function clientIdOf (req: FastifyRequest): string {
  const id = req.headers['x-client-id']
  if (typeof id !== 'string' || !/^[A-Za-z0-9_.-]{1,64}$/.test(id)) throw new AppError('ERR_UNAUTHENTICATED', { detail: 'missing client identity' })
  return id
}

export function idempotencyKeyOf (req: FastifyRequest): string {
  const key = req.headers['idempotency-key']
  if (typeof key !== 'string' || !KEY.test(key)) throw new AppError('ERR_IDEMPOTENCY_KEY_REQUIRED', { detail: 'Idempotency-Key header (1-255 visible ASCII characters) is required' })
  return key
}

/** A stable fingerprint of a JSON body: same fields, any order, same hash. */
export function fingerprint (body: unknown): string {
  return crypto.hash('sha256', canonical(body), 'hex')
}

function canonical (v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().map(k => `${JSON.stringify(k)}:${canonical((v as Record<string, unknown>)[k])}`).join(',')}}`
  }
  return JSON.stringify(v) ?? 'null'
}

/** The answer to a request whose key was seen before. */
export function replay (stored: { fingerprint: string, response: unknown, status: number }, fp: string) {
  if (stored.fingerprint !== fp) throw new AppError('ERR_IDEMPOTENCY_KEY_REUSED')
  return { status: stored.status, body: stored.response, headers: { 'idempotent-replayed': 'true' } }
}
