// `npm run tax:certify`: certify the compensation table against the
// authoritative provider (TAX_PROVIDER_URL; without one, a tax sandbox started
// in-process) and write the certificate. Exits 1 when any jurisdiction failed
// (the certificate still records which passed).
import fs from 'node:fs'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { Type } from 'typebox'
import { loadConfig } from '../../../shared/config.ts'
import { TAX_ENV } from '../config.ts'
import { TOLERANCE, certify } from './certify.ts'

const { values: a } = parseArgs({ options: { table: { type: 'string' }, out: { type: 'string' }, provider: { type: 'string' } } })
// The lane's own variables and defaults, except the provider: unset, a sandbox is started here.
const env = loadConfig(Type.Object({
  TAX_COMPENSATION_TABLE: TAX_ENV.properties.TAX_COMPENSATION_TABLE,
  TAX_CERTIFICATE_FILE: TAX_ENV.properties.TAX_CERTIFICATE_FILE,
  TAX_PROVIDER_URL: Type.Optional(Type.String({ pattern: '^https?://' })),
}), process.env)
const tableFile = a.table ?? env.TAX_COMPENSATION_TABLE
const out = a.out ?? env.TAX_CERTIFICATE_FILE
let providerUrl = a.provider ?? env.TAX_PROVIDER_URL
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
