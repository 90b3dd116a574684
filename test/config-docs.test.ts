// The configuration tables of docs/operations.md against the schemas every
// process validates its environment with: each variable a schema reads is in
// its table with the schema's default, and each variable a table lists is read
// by that schema. A new, renamed or re-defaulted variable fails here until the
// docs say so.
import fs from 'node:fs'
import t, { type Test } from 'tap'
import type { TObject, TSchema } from 'typebox'
import { GATEWAY_ENV } from '../gateway/config.ts'
import { DECK_ENV } from '../services/deck/config.ts'
import { FRAUD_ENV } from '../services/fraud/scoring.ts'
import { CHILD_NAMES, nodeArgsVar, SUPERVISOR_ENV } from '../services/supervisor/config.ts'
import { TAX_ENV, TAX_RECONCILE_ENV } from '../services/tax/config.ts'
import { WORKER_ENV } from '../services/worker/config.ts'
import { LANE_DEFAULTS, LANE_NAMES, LANE_QUEUES, laneSchema } from '../shared/lanes.ts'
import { TRACING_SCHEMA } from '../shared/tracing.ts'

const doc = fs.readFileSync(new URL('../docs/operations.md', import.meta.url), 'utf8')

interface Row { names: string[], cell: string, meaning: string }

/** The table rows under the `### ` heading that starts with `heading`. */
function tableOf (heading: string): Row[] {
  const start = doc.indexOf(`\n### ${heading}`)
  if (start < 0) throw new Error(`docs/operations.md has no section "${heading}"`)
  const rest = doc.slice(start + 1)
  const end = rest.slice(4).search(/\n##/)
  const section = end < 0 ? rest : rest.slice(0, end + 4)
  return section.split('\n').filter(l => l.startsWith('| `')).map(l => {
    const cells = l.split(' | ').map(c => c.replace(/^\| ?| ?\|$/g, ''))
    const names = [...cells[0]!.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map(m => m[1]!)
    return { names, cell: cells[1] ?? '', meaning: cells[2] ?? '' }
  })
}

type Prop = TSchema & { default?: unknown }
const props = (s: TObject): Record<string, Prop> => s.properties as Record<string, Prop>

/** A documented default as the schema would hold it, or undefined for "required", "unset …" and the like. */
function literal (part: string): string | undefined {
  const p = part.replace(/\s*\([^)]*\)/g, '').trim()
  if (p === 'empty') return ''
  if (/^(required|unset|derived|from |built in)/.test(p)) return undefined
  return p.replaceAll('`', '').replace(/^(\d{1,3}(,\d{3})+)$/, m => m.replaceAll(',', ''))
}

/** Splits a row's default cell into one part per variable (" / " or ", "), or the whole cell for all. */
function parts (row: Row, n: number): string[] {
  const bare = row.cell.replace(/\s*\([^)]*\)/g, '')
  for (const sep of [' / ', ', ']) {
    const ps = bare.split(sep)
    if (ps.length === n) return ps
  }
  return Array.from({ length: n }, () => bare)
}

function checkDefault (t: Test, name: string, schemaDefault: unknown, part: string, where: string): void {
  const want = literal(part)
  if (want === undefined) {
    t.ok(schemaDefault === undefined || schemaDefault === '', `${where}${name}: the docs give no default ("${part}"), nor does the schema`)
    return
  }
  const have = String(schemaDefault)
  t.ok(have === want || have.endsWith('/' + want), `${where}${name}: default ${JSON.stringify(want)} in the docs, ${JSON.stringify(have)} in the schema`)
}

function checkSection (t: Test, heading: string, schemas: TObject[], opts: { skip?: string[] } = {}): void {
  const rows = tableOf(heading)
  const keys = Object.assign({}, ...schemas.map(props)) as Record<string, TSchema & { default?: unknown }>
  const documented = new Set(rows.flatMap(r => r.names))
  for (const k of Object.keys(keys)) {
    if (opts.skip?.includes(k)) continue
    t.ok(documented.has(k), `${heading}: ${k} is documented`)
  }
  for (const r of rows) {
    const ps = parts(r, r.names.length)
    r.names.forEach((n, i) => {
      t.ok(n in keys, `${heading}: the documented ${n} is read by the schema`)
      if (n in keys) checkDefault(t, n, keys[n]!.default, ps[i]!, `${heading}: `)
    })
  }
}

t.test('every lane variable, with each lane\'s default', async t => {
  const rows = tableOf('Every lane')
  const schemas = LANE_NAMES.map(n => props(laneSchema(LANE_DEFAULTS[n], LANE_QUEUES[n].length > 0 ? 1 : 0)))
  const documented = new Set(rows.flatMap(r => r.names))
  for (const k of Object.keys(schemas[0]!)) t.ok(documented.has(k), `<LANE>_${k} is documented`)
  for (const r of rows) {
    t.equal(r.names.length, 1, `one variable per row (${r.names.join(', ')})`)
    const n = r.names[0]!
    if (!t.ok(n in schemas[0]!, `the documented <LANE>_${n} is read by the lane schema`)) continue
    const perLane = r.cell.replace(/\s*\([^)]*\)/g, '').split(' / ')
    LANE_NAMES.forEach((lane, i) => checkDefault(t, n, schemas[i]![n]!.default, perLane.length === 3 ? perLane[i]! : perLane[0]!, `${lane}: `))
  }
})

t.test('gateway', async t => { checkSection(t, 'Gateway', [GATEWAY_ENV]) })
t.test('tax and fraud lanes', async t => { checkSection(t, 'Tax lane', [TAX_ENV, TAX_RECONCILE_ENV, FRAUD_ENV]) })
t.test('worker', async t => { checkSection(t, 'Worker', [WORKER_ENV]) })
t.test('deck', async t => { checkSection(t, 'Deck', [DECK_ENV]) })
t.test('tracing', async t => { checkSection(t, 'Tracing', [TRACING_SCHEMA]) })

t.test('supervisor, and one FLEET_NODE_ARGS_<CHILD> per child', async t => {
  const perChild = CHILD_NAMES.map(nodeArgsVar)
  checkSection(t, 'Supervisor', [SUPERVISOR_ENV], { skip: perChild })
  const row = tableOf('Supervisor').find(r => r.meaning.includes('one child only'))
  if (!t.ok(row, 'a row for the per-child node flags')) return
  for (const v of perChild) t.match(row!.meaning, `\`${v.slice('FLEET_NODE_ARGS'.length)}\``, `${v} is named`)
})
