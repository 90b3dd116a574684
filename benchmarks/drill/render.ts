// The report's views: drill.json and drill.html written to the output
// directory, and the summary printed on the console.
import fs from 'node:fs'
import path from 'node:path'
import { LANE_NAMES } from '../../shared/lanes.ts'
import { cpuRows } from '../cpu-phases.ts'
import { renderReport, type Chart, type Table } from './html-report.ts'
import type { DrillReport, Percentiles } from './report.ts'

export function writeReport (r: DrillReport, outDir: string): void {
  fs.mkdirSync(outDir, { recursive: true })
  fs.writeFileSync(path.join(outDir, 'drill.json'), JSON.stringify(r, null, 2))
  fs.writeFileSync(path.join(outDir, 'drill.html'), reportHtml(r))
}

/** "tax 640 × timeout; fraud 2 × timeout", or "none". */
function downSummary (reasons: Record<string, Record<string, number>>): string {
  return Object.entries(reasons).map(([lane, r]) => `${lane} ${Object.entries(r).map(([why, n]) => `${n} × ${why}`).join(', ')}`).join('; ') || 'none'
}

export function printSummary (r: DrillReport, outDir: string): void {
  console.log(`\n${r.command}\n${r.date}, commit ${r.commit}, ${r.machine}\n${r.placement}\n`)
  console.log('| criterion | limit | measured | verdict |\n|---|---|---|---|')
  for (const c of r.criteria) console.log(`| ${c.what} | ${c.limit} | ${c.measured} | ${c.pass ? 'pass' : 'FAIL'} |`)
  const row = (n: string, s: Percentiles): string => `| ${n} | ${s.count} | ${s.p50Ms.toFixed(1)} | ${s.p99Ms.toFixed(1)} | ${s.maxMs.toFixed(0)} |`
  console.log('\n| card-auth | requests | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|')
  console.log([row('baseline', r.card.baseline), row('fault', r.card.fault), row('recovery', r.card.recovery)].join('\n'))
  console.log(`\ncard answers ${JSON.stringify(r.card.answers)}; tax answers ${JSON.stringify(r.tax.answers)}`)
  console.log(breakerLine(r.tax.breaker))
  const storm = r.retryingClient
  console.log(`retrying client: ${storm.sent} sent, ${storm.blocked} blocked at the gateway, at most ${Math.max(0, ...storm.reachedPerKey)} per key reached the lane`)
  console.log(`fleet RSS (${r.rss.processes} Node processes): before ${r.rss.beforeMb} MB, peak during ${r.rss.duringPeakMb} MB, after ${r.rss.afterMb} MB`)
  console.log(`deck samples with a lane down (of ${r.deckSawDown.samples}): ${downSummary(r.deckSawDown.reasons)}`)
  console.log(`connections: ${r.connections.map(c => `${c.role} ${c.total}/${c.limit} (orphaned ${c.orphaned})`).join(', ')}`)
  if (r.cpu) {
    console.log('\n| CPU, cores used | baseline | fault | recovery |\n|---|---|---|---|')
    for (const row of cpuRows(r.cpu, 'fault')) console.log(`| ${row.join(' | ')} |`)
  }
  console.log(`\n${r.pass ? 'PASS' : 'FAIL'}: ${path.relative(process.cwd(), path.join(outDir, 'drill.html'))}, drill.json`)
}

const byCaller = (by: Record<string, number> | null): string =>
  by ? Object.entries(by).sort(([x], [y]) => x.localeCompare(y)).map(([c, n]) => `${c} ${n}`).join(', ') || 'none' : 'by caller n/a'

function breakerLine (b: DrillReport['tax']['breaker']): string {
  return `tax during the fault: p50 ${b.taxInFault.p50Ms} ms, p99 ${b.taxInFault.p99Ms} ms (${b.taxInFault.count} answers); provider calls in the fault ${b.providerCallsInFault ?? 'n/a'} (${byCaller(b.providerCallsByCaller)}; the lane's probes by its /status ${b.laneProbesInFault ?? 'n/a'}, worker-tax's ${b.workerProbesInFault ?? 'n/a'}); ` +
    `provider breaker ${b.opened ? `opened, closed ${b.closedAfterHealMs === null ? 'never seen' : `${Math.round(b.closedAfterHealMs)} ms`} after the heal` : 'never seen open'}`
}

export function reportHtml (r: DrillReport): string {
  return renderReport({
    title: `MC-RT-01 recovery drill — ${r.pass ? 'PASS' : 'FAIL'}`,
    subtitle: [r.command, `${r.date}, commit ${r.commit}, ${r.machine}`, r.placement, `load: card ${r.load.card.rate}/s (sent ${r.load.card.sentRate.toFixed(0)}/s), tax ${r.load.tax.rate}/s, ${r.load.retryingClient.clients} INC-4491 clients re-sending every ${r.load.retryingClient.intervalMs} ms; ${r.load.tool}`],
    verdict: { pass: r.pass, text: r.pass ? 'every criterion passed' : `${r.criteria.filter(c => !c.pass).length} criterion failed` },
    tables: tables(r),
    charts: charts(r),
    bands: [{ from: r.phases.fault[0], to: r.phases.fault[1], label: r.fault.what }],
  })
}

function tables (r: DrillReport): Table[] {
  const s = (n: string, v: Percentiles): Array<string | number> =>
    [n, v.count, v.p50Ms.toFixed(1), v.p99Ms.toFixed(1), v.maxMs.toFixed(0)]
  return [
    {
      title: 'Criteria',
      head: ['criterion', 'limit', 'measured', 'verdict'],
      rows: r.criteria.map(c => [c.what, c.limit, c.measured, c.pass ? 'pass' : 'fail']),
      passColumn: 3,
    },
    {
      title: 'card-auth latency by phase',
      head: ['phase', 'requests', 'p50 ms', 'p99 ms', 'max ms'],
      rows: [s('baseline', r.card.baseline), s('fault', r.card.fault), s('recovery', r.card.recovery)],
    },
    {
      title: 'Fleet RSS and connections',
      head: ['what', 'value'],
      rows: [
        ['RSS before / peak during / after', `${r.rss.beforeMb} / ${r.rss.duringPeakMb} / ${r.rss.afterMb} MB (${r.rss.processes} Node processes)`],
        ...r.connections.map(c => [`connections ${c.role}`, `${c.total} of limit ${c.limit}: ${c.active} active, ${c.idle} idle, ${c.idleInTransaction} idle in transaction, ${c.orphaned} orphaned`]),
        ['tax state changes', r.tax.stateTransitions.map(t => `${t.s.toFixed(1)} s ${t.from}→${t.to}`).join(', ') || 'none'],
        ['deck samples with a lane down', `of ${r.deckSawDown.samples}: ${downSummary(r.deckSawDown.reasons)}`],
        ['other lanes state changes', r.otherLaneTransitions.map(t => `${t.s.toFixed(1)} s ${t.lane} ${t.from}→${t.to}`).join(', ') || 'none'],
        ['answers', `card ${JSON.stringify(r.card.answers)}; tax ${JSON.stringify(r.tax.answers)}; retrying client ${JSON.stringify(r.retryingClient.codes)}`],
      ]
    },
    ...(r.cpu ? [{ title: 'CPU by phase, cores used (fleet processes from /proc/<pid>/stat, PostgreSQL backends by role; the machine from /proc/stat)', head: ['process', 'baseline', 'fault', 'recovery'], rows: cpuRows(r.cpu, 'fault') }] : []),
  ]
}

const stateNum = (s: string | null): number | null => s === 'NORMAL' ? 0 : s === 'RECOVERING' ? 1 : s === 'SATURATED' ? 2 : null
const COLORS: Record<string, string> = { 'card-auth': '#1f6feb', fraud: '#8250df', tax: '#d1242f' }
/** A latency on a log scale: nothing at or under zero. */
const logMs = (v: number | null): number | null => v && Math.max(0.01, v)

function charts (r: DrillReport): Chart[] {
  const x = r.timeline.second
  const { card, tax, storm } = r.timeline
  const lanes = r.timeline.lanes
  const ls = lanes.map(l => l.s)
  return [
    {
      title: 'card-auth latency from scheduled send (ms, log scale)',
      yLabel: 'ms',
      x,
      log: true,
      series: [
        { label: 'p50', values: card.map(c => logMs(c.p50Ms)), color: '#1f6feb' },
        { label: 'p99', values: card.map(c => logMs(c.p99Ms)), color: '#d1242f' },
        { label: 'max', values: card.map(c => logMs(c.maxMs)), color: '#999', dash: true },
        { label: 'SLA 120 ms', values: x.map(() => 120), color: '#06702d', dash: true },
      ]
    },
    {
      title: 'answers per second',
      yLabel: 'req/s',
      x,
      series: [
        { label: 'card 201', values: card.map(c => c.ok), color: '#1f6feb' },
        { label: 'card 429', values: card.map(c => c.r429), color: '#bf8700' },
        { label: 'card errors', values: card.map(c => c.errors), color: '#b00020' },
        { label: 'tax shed', values: tax.map(c => c.shed), color: '#d1242f' },
        { label: 'tax compensated', values: tax.map(c => c.compensated), color: '#8250df', dash: true },
        { label: 'retries blocked at gateway', values: storm.map(c => c.blocked), color: '#444' },
      ]
    },
    {
      title: 'lane state (0 NORMAL, 1 RECOVERING, 2 SATURATED), from the deck (each lane polled every 500 ms)',
      yLabel: 'state',
      x: ls,
      step: true,
      series: LANE_NAMES.map(l => ({
        label: l,
        values: lanes.map(s => stateNum(s[l]?.state ?? null)),
        color: COLORS[l]!,
      })),
    },
    {
      title: 'active permits',
      yLabel: 'permits',
      x: ls,
      step: true,
      series: LANE_NAMES.map(l => ({ label: l, values: lanes.map(s => s[l]?.active ?? null), color: COLORS[l]! })),
    },
    { title: 'fleet RSS (sum over Node processes, MB)', yLabel: 'MB', x: ls, series: [{ label: 'RSS', values: lanes.map(s => s.rssMb), color: '#444' }] },
  ]
}
