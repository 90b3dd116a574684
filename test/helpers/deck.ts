// The deck as a real process for a test, on port 0, against the test database
// with the deck's own role, polling the URLs it is given.
import crypto from 'node:crypto'
import type { Test } from 'tap'
import { deckRoleName } from '../../shared/lanes.ts'
import type { TestDb } from './db.ts'
import { call, type Res } from './http.ts'
import { startProcess, type Proc } from './procs.ts'

export interface Deck {
  proc: Proc
  url: string
  token: string
  admin (method: string, path: string, json?: unknown, headers?: Record<string, string>): Promise<Res>
}

export interface DeckTargets {
  cardAuth?: string, fraud?: string, tax?: string, gateway?: string, sandbox?: string, workers?: string
}

const REFUSED = 'http://127.0.0.1:9' // the discard port: nothing listens, the connection is refused

export async function startDeck (
  t: Test, db: TestDb, targets: DeckTargets, env: Record<string, string> = {}
): Promise<Deck> {
  const token = crypto.randomBytes(24).toString('base64url')
  const proc = await startProcess(t, 'deck', 'services/deck/main.ts', {
    ...db.env,
    DECK_PORT: '0',
    ADMIN_TOKEN: token,
    DATABASE_URL: db.roleUrl(deckRoleName(db.env)),
    CARD_AUTH_URL: targets.cardAuth ?? REFUSED,
    FRAUD_URL: targets.fraud ?? REFUSED,
    TAX_URL: targets.tax ?? REFUSED,
    ...(targets.gateway ? { GATEWAY_URL: targets.gateway } : {}),
    ...(targets.sandbox ? { TAX_SANDBOX_URL: targets.sandbox } : {}),
    ...(targets.workers ? { WORKER_URLS: targets.workers } : {}),
    DECK_POLL_MS: '250',
    DECK_TARGET_TIMEOUT_MS: '200',
    ...env,
  })
  return {
    proc,
    url: proc.url,
    token,
    admin: (method, path, json, headers = {}) => call(proc.url + path, { method, json, headers: { authorization: `Bearer ${token}`, ...headers } }),
  }
}
