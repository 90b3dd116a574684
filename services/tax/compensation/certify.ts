// Certification of the compensation table: compare every entry with the
// authoritative provider within ±0.5% relative (the CLI is certify-cli.ts).
import { setTimeout as sleep } from 'node:timers/promises'
import { createOriginPool } from '../../../shared/lane-kit/http.ts'
import type { Certificate } from './certificate.ts'
import { readTable, tableChecksum } from './table.ts'

export const TOLERANCE = 0.005

const ATTEMPTS = 4
const MAX_WAIT_MS = 1_000

/**
 * One quote from the provider. A provider that says it is busy (429, or 503 as
 * a process under pressure answers while the fleet starts on a loaded host) is
 * asked again, waiting as told (at most 1 s) up to four times: busy is not a
 * disagreement with the table, and must not block a start by itself.
 */
async function askProvider (provider: ReturnType<typeof createOriginPool>, j: string) {
  for (let attempt = 1; ; attempt++) {
    const res = await provider.request({
      path: '/v1/rates/quote',
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jurisdiction: j, amount: { value: 1_000_000, currency: 'EUR' } }),
      signal: AbortSignal.timeout(5_000),
    })
    const body = await res.body.json().catch(() => ({})) as { rate?: number }
    if ((res.statusCode !== 503 && res.statusCode !== 429) || attempt === ATTEMPTS) return { res, body }
    const told = Number(res.headers['retry-after'])
    await sleep(Number.isFinite(told) ? Math.min(told * 1000, MAX_WAIT_MS) : MAX_WAIT_MS)
  }
}

export async function certify (o: { tableFile: string, providerUrl: string, now?: Date }): Promise<Certificate> {
  const table = readTable(o.tableFile)
  const results: Certificate['results'] = {}
  const provider = createOriginPool(new URL(o.providerUrl).origin, { connections: 2, timeoutMs: 5_000 })
  for (const [j, tableRate] of Object.entries(table.rates)) {
    try {
      const { res, body } = await askProvider(provider, j)
      if (res.statusCode !== 200 || typeof body.rate !== 'number') throw new Error(`provider answered ${res.statusCode}`)
      const providerRate = body.rate
      const relativeDiff = providerRate === 0
        ? (tableRate === 0 ? 0 : Infinity)
        : Math.abs(tableRate - providerRate) / providerRate
      const rounded = Number.isFinite(relativeDiff) ? Math.round(relativeDiff * 1e6) / 1e6 : null
      results[j] = { ok: relativeDiff <= TOLERANCE, tableRate, providerRate, relativeDiff: rounded }
    } catch (err) {
      results[j] = { ok: false, tableRate, providerRate: null, relativeDiff: null, error: (err as Error).message }
    }
  }
  await provider.close()
  // The checksum is recomputed, not copied: a table edited by hand certifies as what it is.
  return {
    tableVersion: table.version,
    tableChecksum: tableChecksum(table),
    certifiedAt: (o.now ?? new Date()).toISOString(),
    tolerance: TOLERANCE,
    provider: o.providerUrl,
    results,
  }
}
