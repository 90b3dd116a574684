// The drill's connections to the fleet: the deck's admin API (as an operator),
// one gateway pool per load stream, and the database the after-checks ask.
import pg from 'pg'
import { Pool } from 'undici'
import { gatewayPost } from '../run-info.ts'
import type { FleetUnderTest } from './fleet.ts'
import type { DrillOptions } from './options.ts'

/** One lane in the deck's GET /admin/lanes, as far as the drill reads it. */
export interface DeckLane {
  name: string
  up: boolean
  error?: string
  status?: { state?: string, active?: number, permits?: number, breakers?: Array<{ state?: string, probes?: number }> }
  /** When the deck sent its poll; pollMs is how long the lane took to answer it. */
  checkedAt: string
  pollMs?: number
  rssBytes?: number
}

export interface DeckLanes {
  deck?: { rssBytes?: number }
  lanes: DeckLane[]
  processes: Array<{ rssBytes?: number }>
}

export class DrillClients {
  readonly deck: Pool
  readonly cardPool: Pool
  readonly taxPool: Pool
  readonly stormPool: Pool
  readonly db: pg.Client
  readonly #fleet: FleetUnderTest

  constructor (fleet: FleetUnderTest, o: Pick<DrillOptions, 'cardRate' | 'taxRate' | 'stormClients'>) {
    this.#fleet = fleet
    this.deck = new Pool(fleet.deckUrl, { connections: 4 })
    this.cardPool = new Pool(fleet.gatewayUrl, { connections: Math.min(2_048, Math.ceil(o.cardRate * 0.6) + 16) })
    this.taxPool = new Pool(fleet.gatewayUrl, { connections: Math.min(2_048, Math.ceil(o.taxRate * 2.5) + 16) })
    this.stormPool = new Pool(fleet.gatewayUrl, { connections: Math.max(1, o.stormClients) })
    this.db = new pg.Client({ connectionString: fleet.databaseUrl })
  }

  async admin<T = unknown> (method: 'GET' | 'PUT', p: string, body?: unknown): Promise<T> {
    const r = await this.deck.request({
      method,
      path: p,
      headers: {
        authorization: `Bearer ${this.#fleet.adminToken}`,
        'x-operator': 'mc-rt-01-drill',
        ...(body ? { 'content-type': 'application/json' } : {}),
      },
      body: body ? JSON.stringify(body) : undefined,
      signal: AbortSignal.timeout(5_000),
    })
    const json = await r.body.json()
    if (r.statusCode !== 200) throw new Error(`deck ${method} ${p}: ${r.statusCode} ${JSON.stringify(json)}`)
    return json as T
  }

  lanes (): Promise<DeckLanes> {
    return this.admin<DeckLanes>('GET', '/admin/lanes')
  }

  /** The tax sandbox's latency, set through the deck. */
  async setTaxLatency (ms: number): Promise<void> {
    await this.admin('PUT', '/admin/faults/tax', { latencyMs: ms })
  }

  post (pool: Pool, path: string, key: string, body: unknown) {
    return gatewayPost(pool, this.#fleet.apiKey, path, key, body)
  }

  async close (): Promise<void> {
    await Promise.allSettled([
      this.cardPool.close(),
      this.taxPool.close(),
      this.stormPool.close(),
      this.deck.close(),
      this.db.end(),
    ])
  }
}
