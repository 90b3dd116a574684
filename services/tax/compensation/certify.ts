// `npm run tax:certify`: compare every entry of the compensation table with the
// authoritative provider (TAX_PROVIDER_URL; without one, a tax sandbox started
// in-process) within ±0.5% relative, and write the certificate. Exits 1 when
// any jurisdiction failed (the certificate still records which passed).
import fs from 'node:fs'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { request } from 'undici'
import type { Certificate } from './certificate.ts'
import { DEFAULT_TABLE_FILE, readTable, tableChecksum } from './table.ts'

export const TOLERANCE = 0.005

export async function certify (o: { tableFile: string, providerUrl: string, now?: Date }): Promise<Certificate> {
  const table = readTable(o.tableFile)
  const results: Certificate['results'] = {}
  for (const [j, tableRate] of Object.entries(table.rates)) {
    try {
      const res = await request(`${o.providerUrl}/v1/rates/quote`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
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
  // The checksum is recomputed, not copied: a table edited by hand certifies as what it is.
  return { tableVersion: table.version, tableChecksum: tableChecksum(table), certifiedAt: (o.now ?? new Date()).toISOString(), tolerance: TOLERANCE, provider: o.providerUrl, results }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values: a } = parseArgs({ options: { table: { type: 'string' }, out: { type: 'string' }, provider: { type: 'string' } } })
  const tableFile = a.table ?? process.env.TAX_COMPENSATION_TABLE ?? DEFAULT_TABLE_FILE
  const out = a.out ?? process.env.TAX_CERTIFICATE_FILE ?? '.data/tax-certificate.json'
  let providerUrl = a.provider ?? process.env.TAX_PROVIDER_URL
  let stop = async (): Promise<void> => {}
  if (!providerUrl) {
    const { buildApp } = await import('../../tax-sandbox/app.ts')
    const sandbox = buildApp()
    providerUrl = await sandbox.listen({ port: 0, host: '127.0.0.1' })
    stop = () => sandbox.close()
  }
  const cert = await certify({ tableFile, providerUrl })
  await stop()
  fs.mkdirSync(path.dirname(out), { recursive: true })
  fs.writeFileSync(out, JSON.stringify(cert, null, 2))
  const failed = Object.entries(cert.results).filter(([, r]) => !r.ok)
  console.log(`table ${cert.tableVersion} (${cert.tableChecksum}) against ${providerUrl}: ${Object.keys(cert.results).length - failed.length} passed, ${failed.length} failed (tolerance ±${TOLERANCE * 100}%)`)
  for (const [j, r] of failed) console.log(`  FAILED ${j}: table ${r.tableRate}, provider ${r.providerRate ?? r.error}${r.relativeDiff !== null ? `, off by ${(r.relativeDiff * 100).toFixed(2)}%` : ''}`)
  console.log(`certificate written to ${out}`)
  process.exit(failed.length > 0 ? 1 : 0)
}
