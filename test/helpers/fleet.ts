// A fleet of real processes for a test: tax sandbox, the lanes asked for and
// the gateway, each its own OS process on port 0, against the test's database.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { createKey } from '../../shared/api-keys.ts'
import { laneLimits, type LaneName } from '../../shared/lanes.ts'
import type { TestDb } from './db.ts'
import { laneEnv, startProcess, type Proc } from './procs.ts'
import { untilServing } from './gateway.ts'
import { call, type Res } from './http.ts'

export interface Fleet {
  sandbox: Proc
  lanes: Partial<Record<LaneName, Proc>>
  gateway: Proc
  apiKey: string
  /** The gateway's API key file (a second gateway can share it). */
  keysFile: string
  /** A key for another client; live once the gateway reloads its key file (within 2 s). */
  addClient (clientId: string): Promise<string>
  /** POST/GET through the gateway as the test client. */
  post (path: string, json: unknown, key?: string, headers?: Record<string, string>): Promise<Res>
  get (path: string): Promise<Res>
  status (lane: LaneName): Promise<any>
  setFaults (f: Record<string, unknown>): Promise<void>
  startLane (lane: LaneName): Promise<Proc>
}

export async function startFleet (
  t: Test, db: TestDb, opts: { lanes?: LaneName[], env?: Record<string, string> } = {}
): Promise<Fleet> {
  const env = { ...db.env, ...opts.env }
  // The sandbox plays the provider: it fails only as a test tells it to, never
  // by shedding because the machine running the tests is busy.
  const sandbox = await startProcess(t, 'tax-sandbox', 'services/tax-sandbox/main.ts', { TAX_SANDBOX_PORT: '0', TAX_SANDBOX_PRESSURE_MAX_EVENT_LOOP_DELAY_MS: '0', TAX_SANDBOX_PRESSURE_MAX_EVENT_LOOP_UTILIZATION: '0' })
  const lanes: Partial<Record<LaneName, Proc>> = {}
  const startLane = async (lane: LaneName): Promise<Proc> => {
    const p = await startProcess(t, lane, `services/${lane}/main.ts`, laneEnv(lane, env, db.roleUrl(laneLimits(lane, env).db.role), { TAX_PROVIDER_URL: sandbox.url }))
    lanes[lane] = p
    return p
  }
  await Promise.all((opts.lanes ?? ['card-auth', 'fraud', 'tax']).map(startLane))
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-keys-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const keysFile = path.join(dir, 'api-keys.json')
  const apiKey = createKey(keysFile, 'test-client')
  const unused = 'http://127.0.0.1:9' // discard port: a lane that is not running refuses at once
  // Tests read each shed answer's admission decision from its Server-Timing.
  const gateway = await startProcess(t, 'gateway', 'gateway/main.ts', {
    GATEWAY_SERVER_TIMING: 'on',
    ...env,
    GATEWAY_PORT: '0',
    GATEWAY_HOST: '127.0.0.1',
    API_KEYS_FILE: keysFile,
    CARD_AUTH_URL: lanes['card-auth']?.url ?? unused,
    FRAUD_URL: lanes.fraud?.url ?? unused,
    TAX_URL: lanes.tax?.url ?? unused,
  })
  await untilServing(gateway.url)
  let n = 0
  return {
    sandbox,
    lanes,
    gateway,
    apiKey,
    keysFile,
    startLane,
    addClient: async clientId => {
      const key = createKey(keysFile, clientId)
      const until = Date.now() + 10_000
      while (Date.now() < until) {
        if ((await call(gateway.url + '/v1/tax/quotes/00000000-0000-4000-8000-000000000000', { headers: { authorization: `Bearer ${key}` } })).status !== 401) return key
        await sleep(200)
      }
      throw new Error('gateway did not pick up the new key')
    },
    post: (p, json, key = `k-${process.pid}-${++n}`, headers = {}) => call(gateway.url + p, { json, headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': key, ...headers } }),
    get: p => call(gateway.url + p, { headers: { authorization: `Bearer ${apiKey}` } }),
    status: async lane => (await call(lanes[lane]!.url + '/status')).body,
    setFaults: async f => { const r = await call(sandbox.url + '/faults', { method: 'PUT', json: f }); if (r.status !== 200) throw new Error(`faults: ${JSON.stringify(r.body)}`) },
  }
}
