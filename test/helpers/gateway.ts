// A gateway process on its own, for what the gateway decides before any lane
// is asked (body limits, retry storms, its own pressure): no database, and every
// lane URL on the discard port, so a request the gateway lets through is
// answered 503 ERR_LANE_UNAVAILABLE — a clear "it got past the edge".
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Test } from 'tap'
import { createKey } from '../../shared/api-keys.ts'
import { startProcess, type Proc } from './procs.ts'
import { call, type Res } from './http.ts'

export interface LoneGateway {
  proc: Proc
  url: string
  apiKey: string
  post (path: string, json: unknown, key: string): Promise<Res>
}

export async function startLoneGateway (t: Test, env: Record<string, string> = {}): Promise<LoneGateway> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-gw-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const keysFile = path.join(dir, 'api-keys.json')
  const apiKey = createKey(keysFile, 'edge-client')
  const down = 'http://127.0.0.1:9'
  const proc = await startProcess(t, 'gateway', 'gateway/main.ts', {
    GATEWAY_PORT: '0', GATEWAY_HOST: '127.0.0.1', API_KEYS_FILE: keysFile, CARD_AUTH_URL: down, FRAUD_URL: down, TAX_URL: down, ...env,
  })
  return {
    proc, url: proc.url, apiKey,
    post: (p, json, key) => call(proc.url + p, { json, headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key } }),
  }
}
