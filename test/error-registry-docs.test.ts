// The error registry and the README's error table list the same codes with the same statuses.
import fs from 'node:fs'
import t from 'tap'
import { ERRORS } from '../shared/errors.ts'

const doc = fs.readFileSync(new URL('../README.md', import.meta.url), 'utf8')
const documented = new Map([...doc.matchAll(/^\| `(ERR_[A-Z_]+)` \| (\d{3}) \|/gm)].map(m => [m[1]!, Number(m[2])]))

t.test('every registry code is documented with its status', async t => {
  for (const [code, spec] of Object.entries(ERRORS)) t.equal(documented.get(code), spec.status, code)
})

t.test('the docs name no code the registry does not have', async t => {
  for (const code of documented.keys()) t.ok(Object.hasOwn(ERRORS, code), code)
})
