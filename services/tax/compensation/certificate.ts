// Certified compensation (ADV-UC-01). A compensated rate is used only when:
// the table's checksum is intact, a certificate exists for exactly that checksum,
// the certificate is younger than its max age, and that jurisdiction passed.
// Anything else is ERR_UNTESTED_COMPENSATION_REJECTED. Never a default or zero rate.
import fs from 'node:fs'
import { readTable, tableChecksum, type RateTable } from './table.ts'

export interface Certificate {
  tableVersion: string
  tableChecksum: string
  certifiedAt: string
  /** Relative tolerance, e.g. 0.005 for ±0.5%. */
  tolerance: number
  provider: string
  results: Record<string, {
    ok: boolean, tableRate: number, providerRate: number | null, relativeDiff: number | null, error?: string
  }>
}

export type Compensation =
  | { ok: true, rate: number, tableVersion: string }
  | { ok: false, why: 'no_rate' | 'not_certified', detail: string }

export interface CompensationStatus {
  tableVersion?: string
  tableChecksum?: string
  certificateFor?: string
  certifiedAt?: string
  certified: boolean
  detail: string
}
export interface CompensationSource {
  rateFor (jurisdiction: string, now?: Date): Compensation
  status (): CompensationStatus
}

/** Load table and certificate, re-reading them when either file changes (re-certify without a restart). */
export function compensationSource (
  o: { tableFile: string, certificateFile: string, maxAgeMs: number, reloadMs?: number }
): CompensationSource & { close (): void } {
  let table: RateTable | undefined
  let cert: Certificate | undefined
  let problem = ''
  let stamp = ''
  const load = (): void => {
    const s = [o.tableFile, o.certificateFile].map(f => (fs.existsSync(f) ? fs.statSync(f).mtimeMs : 0)).join(':')
    if (s === stamp) return
    stamp = s
    problem = ''
    try { table = readTable(o.tableFile) } catch (err) { table = undefined; problem = `rate table unreadable: ${(err as Error).message}` }
    try { cert = fs.existsSync(o.certificateFile) ? JSON.parse(fs.readFileSync(o.certificateFile, 'utf8')) as Certificate : undefined } catch { cert = undefined }
    if (table && tableChecksum(table) !== table.checksum) problem = `rate table ${table.version} does not match its own checksum (edited after it was made)`
    else if (!cert) problem ||= 'no certificate: run npm run tax:certify'
    else if (table && cert.tableChecksum !== table.checksum) problem = `certificate is for table ${cert.tableChecksum}, not ${table.checksum}`
  }
  load()
  const timer = setInterval(load, o.reloadMs ?? 2_000)
  timer.unref()
  return {
    close: () => clearInterval(timer),
    status: () => ({ tableVersion: table?.version, tableChecksum: table?.checksum, certificateFor: cert?.tableChecksum, certifiedAt: cert?.certifiedAt, certified: !problem && !!cert, detail: problem || `certified ${cert!.certifiedAt}` }),
    rateFor (jurisdiction, now = new Date()) {
      const rate = table?.rates[jurisdiction]
      if (table && rate === undefined) return { ok: false, why: 'no_rate', detail: `no compensation rate for ${jurisdiction}` }
      if (problem || !table || !cert || rate === undefined) return { ok: false, why: 'not_certified', detail: problem || 'no certificate' }
      const age = now.getTime() - Date.parse(cert.certifiedAt)
      if (!(age <= o.maxAgeMs)) return { ok: false, why: 'not_certified', detail: `certificate of ${cert.certifiedAt} is older than ${Math.round(o.maxAgeMs / 3_600_000)} h` }
      const r = cert.results[jurisdiction]
      if (!r?.ok) return { ok: false, why: 'not_certified', detail: `the ${jurisdiction} rate failed certification${r?.error ? ` (${r.error})` : ''}` }
      return { ok: true, rate, tableVersion: table.version }
    },
  }
}
