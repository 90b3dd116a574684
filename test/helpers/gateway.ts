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
import { call, eventually, type Res } from './http.ts'

export interface LoneGateway {
  proc: Proc
  url: string
  apiKey: string
  post (path: string, json: unknown, key: string): Promise<Res>
}

/**
 * Resolves once a gateway just started answers for itself rather than shedding:
 * on a starved host its start-up stall can land in under-pressure's first
 * event-loop sample (a mean over the interval), and it sheds its first second as
 * 503 ERR_GATEWAY_OVERLOADED (seen in CI; reproduced with a test pinned to a core
 * shared with busy loops). That is the gateway doing its job, not what a test
 * of anything else is about. The probe has no key, so it counts against no
 * client's rate limit: 401 means the request got past the pressure check.
 */
export async function untilServing (url: string, timeoutMs = 30_000): Promise<void> {
  const serving = await eventually(async () => (await call(url + '/v1/tax/quotes/00000000-0000-4000-8000-000000000000')).body?.code !== 'ERR_GATEWAY_OVERLOADED', timeoutMs, 100)
  if (!serving) throw new Error(`the gateway at ${url} was still shedding as overloaded after ${timeoutMs} ms`)
}

/** A lone gateway; `pressed`: one started to be under pressure, not waited on to serve. */
export async function startLoneGateway (
  t: Test, env: Record<string, string> = {}, opts: { pressed?: boolean } = {}
): Promise<LoneGateway> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-gw-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const keysFile = path.join(dir, 'api-keys.json')
  const apiKey = createKey(keysFile, 'edge-client')
  const down = 'http://127.0.0.1:9'
  const proc = await startProcess(t, 'gateway', 'gateway/main.ts', {
    GATEWAY_PORT: '0', GATEWAY_HOST: '127.0.0.1', API_KEYS_FILE: keysFile, CARD_AUTH_URL: down, FRAUD_URL: down, TAX_URL: down, ...env,
  })
  if (!opts.pressed) await untilServing(proc.url)
  return {
    proc,
    url: proc.url,
    apiKey,
    post: (p, json, key) => call(proc.url + p, { json, headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key } }),
  }
}
