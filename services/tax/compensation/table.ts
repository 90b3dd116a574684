// The compensation rate table: committed, versioned, checksummed. The checksum
// covers the version and every rate (canonical JSON), so any edit of the file is
// visible, and a certificate is only valid for the exact table it checked.
import crypto from 'node:crypto'
import fs from 'node:fs'
import { treePath } from '../../../shared/tree.ts'

export interface RateTable { version: string, source?: string, rates: Record<string, number>, checksum: string }

export function tableChecksum (t: { version: string, rates: Record<string, number> }): string {
  const rates = Object.fromEntries(Object.keys(t.rates).sort().map(k => [k, t.rates[k]]))
  const canonical = JSON.stringify({ version: t.version, rates })
  return 'sha256:' + crypto.createHash('sha256').update(canonical).digest('hex')
}

export const DEFAULT_TABLE_FILE = treePath('services/tax/compensation/rates-table.json')

export function readTable (file: string): RateTable {
  const t = JSON.parse(fs.readFileSync(file, 'utf8')) as RateTable
  if (typeof t.version !== 'string' || !t.rates || typeof t.rates !== 'object') throw new Error(`${file}: not a rate table`)
  for (const [j, r] of Object.entries(t.rates)) if (typeof r !== 'number' || !(r >= 0 && r < 1)) throw new Error(`${file}: bad rate for ${j}`)
  return t
}
