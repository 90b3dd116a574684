// Certification of the compensation table: compare every entry with the
// authoritative provider within ±0.5% relative (the CLI is certify-cli.ts).
import { createOriginPool } from '../../../shared/lane-kit/http.ts'
import type { Certificate } from './certificate.ts'
import { readTable, tableChecksum } from './table.ts'

export const TOLERANCE = 0.005

export async function certify (o: { tableFile: string, providerUrl: string, now?: Date }): Promise<Certificate> {
  const table = readTable(o.tableFile)
  const results: Certificate['results'] = {}
  const provider = createOriginPool(new URL(o.providerUrl).origin, { connections: 2, timeoutMs: 5_000 })
  for (const [j, tableRate] of Object.entries(table.rates)) {
    try {
      const res = await provider.request({
        path: '/v1/rates/quote', method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jurisdiction: j, amount: { value: 1_000_000, currency: 'EUR' } }), signal: AbortSignal.timeout(5_000),
      })
      const body = await res.body.json() as { rate?: number }
      if (res.statusCode !== 200 || typeof body.rate !== 'number') throw new Error(`provider answered ${res.statusCode}`)
      const providerRate = body.rate
      const relativeDiff = providerRate === 0 ? (tableRate === 0 ? 0 : Infinity) : Math.abs(tableRate - providerRate) / providerRate
      results[j] = { ok: relativeDiff <= TOLERANCE, tableRate, providerRate, relativeDiff: Number.isFinite(relativeDiff) ? Math.round(relativeDiff * 1e6) / 1e6 : null }
    } catch (err) {
      results[j] = { ok: false, tableRate, providerRate: null, relativeDiff: null, error: (err as Error).message }
    }
  }
  await provider.close()
  // The checksum is recomputed, not copied: a table edited by hand certifies as what it is.
  return { tableVersion: table.version, tableChecksum: tableChecksum(table), certifiedAt: (o.now ?? new Date()).toISOString(), tolerance: TOLERANCE, provider: o.providerUrl, results }
}
