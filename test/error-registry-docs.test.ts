// The error registry and the error table of docs/api.md list the same codes, each
// once, with the same status and the same Retry-After.
import fs from 'node:fs'
import t from 'tap'
import { ERRORS, type ErrorSpec } from '../shared/errors.ts'

const doc = fs.readFileSync(new URL('../docs/api.md', import.meta.url), 'utf8')
// | `ERR_X` | 503 | 5 s | meaning |   (Retry-After empty, "N s" or "≥ N s")
const rows = [...doc.matchAll(/^\| `(ERR_[A-Z_]+)` \| (\d{3}) \| ([^|]*) \|/gm)]
  .map(m => ({ code: m[1]!, status: Number(m[2]), retryAfter: /(\d+) s/.exec(m[3]!)?.[1] }))
const documented = new Map(rows.map(r => [r.code, r]))

t.test('the table is there, one row per code', async t => {
  t.ok(rows.length > 0, 'docs/api.md has an error table')
  t.equal(documented.size, rows.length, 'no code is listed twice')
})

t.test('every registry code is documented with its status and Retry-After', async t => {
  for (const [code, spec] of Object.entries(ERRORS) as Array<[string, ErrorSpec]>) {
    const row = documented.get(code)
    t.equal(row?.status, spec.status, `${code} status`)
    t.equal(row?.retryAfter, spec.retryAfter === undefined ? undefined : String(spec.retryAfter), `${code} Retry-After`)
  }
})

t.test('the docs name no code the registry does not have', async t => {
  for (const code of documented.keys()) t.ok(Object.hasOwn(ERRORS, code), code)
})
