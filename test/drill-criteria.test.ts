// MC-RT-01's verdict: every criterion passes on good figures, and each one
// fails on its own bad figure (the drill exits 1 then).
import t from 'tap'
import { evaluate, type DrillFigures } from '../benchmarks/drill/criteria.ts'
import { renderReport } from '../benchmarks/drill/html-report.ts'

const good = (): DrillFigures => ({
  card: { fault: { count: 1000, p50Ms: 8, p99Ms: 60, maxMs: 110 }, errors: 0 },
  tax: {
    shed: 400,
    decided: {
      count: 400,
      under5: 400,
      p50Ms: 0.9,
      p99Ms: 3.2,
      maxMs: 4.6,
      lane: { p50Ms: 0.1, p99Ms: 0.3, maxMs: 0.9 },
      laneAnswer: { p50Ms: 0.5, p99Ms: 2.1, maxMs: 3.9 },
    },
    errors: 0,
    saturatedSeen: true,
  },
  storm: { errors: 0, maxReachedPerKey: 4, allowedPerKey: 4 },
  taxRecoveryMs: 1_800,
  ledger: { acknowledged: 1000, lost: 0, doubled: 0, phantom: 0 },
  connections: [{ role: 'card_auth_ds', orphaned: 0, total: 40, limit: 40 }, { role: 'tax_ds', orphaned: 0, total: 5, limit: 5 }],
})
const failing = (f: DrillFigures): string[] => evaluate(f).filter(c => !c.pass).map(c => c.id)

t.test('good figures pass every criterion', async t => {
  const c = evaluate(good())
  t.equal(c.length, 8)
  t.same(c.filter(x => !x.pass), [])
})

t.test('each criterion fails on its own', async t => {
  const cases: Array<[string, (f: DrillFigures) => void]> = [
    ['fault-took-effect', f => { f.tax.saturatedSeen = false }],
    ['fault-took-effect', f => { f.tax.shed = 0 }],
    ['card-p99', f => { f.card.fault.p99Ms = 121 }],
    ['card-p99', f => { f.card.fault.count = 0 }],
    ['no-errors', f => { f.card.errors = 1 }],
    ['no-errors', f => { f.tax.errors = 1 }],
    ['no-errors', f => { f.storm.errors = 1 }],
    ['shed-decision', f => { f.tax.decided.under5 = 399 }],
    ['shed-decision', f => { f.tax.decided = { count: 0, under5: 0, p50Ms: 0, p99Ms: 0, maxMs: 0, lane: { p50Ms: 0, p99Ms: 0, maxMs: 0 }, laneAnswer: { p50Ms: 0, p99Ms: 0, maxMs: 0 } } }],
    ['tax-recovery', f => { f.taxRecoveryMs = 5_000 }],
    ['tax-recovery', f => { f.taxRecoveryMs = null }],
    ['retry-storm', f => { f.storm.maxReachedPerKey = 5 }],
    ['ledger', f => { f.ledger.lost = 1 }],
    ['ledger', f => { f.ledger.doubled = 1 }],
    ['ledger', f => { f.ledger.phantom = 1 }],
    ['ledger', f => { f.ledger.acknowledged = 0 }],
    ['orphaned-connections', f => { f.connections[1]!.orphaned = 1 }],
    ['orphaned-connections', f => { f.connections[0]!.total = 41 }],
    ['orphaned-connections', f => { f.connections = [] }],
  ]
  for (const [id, spoil] of cases) {
    const f = good()
    spoil(f)
    t.same(failing(f), [id], `${id}: ${spoil.toString().slice(6)}`)
  }
  t.same(failing(good()).length, 0)
  t.same(evaluate(good(), { cardP99Ms: 50, decideMs: 5, recoveryMs: 5_000 }).filter(c => !c.pass).map(c => c.id), ['card-p99'], 'thresholds are flags')
})

t.test('a shed request is judged as the client saw it, every one, with the lane\'s decision time beside it', async t => {
  const c = evaluate(good()).find(x => x.id === 'shed-decision')!
  t.equal(c.pass, true)
  t.match(c.what, /as the client sees it/)
  t.match(c.measured, /^p50 0\.90 ms, p99 3\.20 ms, max 4\.60 ms; 0 of 400 at or over 5 ms \(in the lane: decided p50 0\.10 ms, p99 0\.30 ms, max 0\.90 ms; answered p50 0\.50 ms, p99 2\.10 ms, max 3\.90 ms\)$/)
  const f = good()
  f.tax.decided.under5 = 399
  f.tax.decided.maxMs = 5.2
  t.equal(evaluate(f).find(x => x.id === 'shed-decision')!.pass, false, 'one answer of 400 at 5.2 ms fails it, however fast the lane decided')
})

t.test('the HTML report inlines uPlot and writes API text as text', async t => {
  const html = renderReport({
    title: 'x <script>alert(1)</script>',
    subtitle: ['a & b'],
    verdict: { pass: false, text: '1 failed' },
    tables: [{ title: 't', head: ['a', 'v'], rows: [['<img src=x onerror=alert(1)>', 'fail']], passColumn: 1 }],
    charts: [{ title: '</script><b>', yLabel: 'ms', x: [0, 1], series: [{ label: 'p99', values: [1, null], color: '#000' }] }],
    bands: [{ from: 0, to: 1, label: 'fault' }],
  })
  t.match(html, /var uPlot|uPlot=/, 'uPlot is inlined, so the file works offline')
  t.notMatch(html, /<script>alert|<img src=x/, 'titles and cells are escaped')
  t.equal(html.split('</script>').length - 1, 2, 'chart data cannot close its <script> early')
  t.match(html, /<td class="fail">fail<\/td>/)
})
