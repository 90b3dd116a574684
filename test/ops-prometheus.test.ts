// deploy/prometheus and deploy/grafana: the real promtool accepts the scrape
// config, the alert rules and their unit tests, and every metric an alert or a
// panel reads is one the fleet exports (a renamed metric would otherwise leave
// an alert silently empty, never firing).
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { parse, stringify } from 'yaml'
import client from 'prom-client'

const run = promisify(execFile)
const ROOT = path.resolve(import.meta.dirname, '..')
const CONFIG = 'deploy/prometheus/prometheus.yml'
const RULES = 'deploy/prometheus/rules/watertight.rules.yml'
const RULE_TESTS = 'deploy/prometheus/tests/watertight.rules.test.yml'
const DASHBOARD = 'deploy/grafana/watertight-dashboard.json'

const ALERTS = ['BulkheadSaturated', 'BulkheadRejectionRateHigh', 'LaneDown', 'QueueLag', 'ALERT_BULKHEAD_RECOVERY_LAG', 'GatewayRetryStorm', 'RetryGuardStoreDown', 'DependencyBreakerOpen']
const LANES = ['card-auth', 'fraud', 'tax']

// What the fleet's processes declare (prom-client), by type: histograms and
// summaries are scraped under their suffixed names too.
const FLEET: Record<string, 'Gauge' | 'Counter' | 'Histogram' | 'Summary'> = {
  bulkhead_threads_active: 'Gauge',
  bulkhead_threads_max: 'Gauge',
  bulkhead_queue_depth: 'Gauge',
  bulkhead_queue_capacity: 'Gauge',
  bulkhead_rejection_total: 'Counter',
  bulkhead_state: 'Gauge',
  bulkhead_permit_wait_seconds: 'Histogram',
  bulkhead_db_pool_connections: 'Gauge',
  http_request_duration_seconds: 'Histogram',
  bulkhead_request_latency_seconds: 'Gauge',
  bulkhead_recovery_lag_seconds: 'Gauge',
  bulkhead_pool_resets_total: 'Counter',
  bulkhead_pool_reset_errors_total: 'Counter',
  db_pool_connection_leaks_total: 'Counter',
  gateway_upstream_inflight: 'Gauge',
  gateway_retry_storm_blocked_total: 'Counter',
  gateway_lane_unavailable_total: 'Counter',
  gateway_shed_total: 'Counter',
  gateway_retry_guard_store_up: 'Gauge',
  gateway_retry_guard_local_decisions_total: 'Counter',
  dependency_breaker_state: 'Gauge',
  dependency_breaker_transitions_total: 'Counter',
  dependency_breaker_short_circuited_total: 'Counter',
  queue_jobs: 'Gauge',
  queue_max_workers: 'Gauge',
  queue_oldest_pending_age_seconds: 'Gauge',
  queue_worker_running: 'Gauge',
  queue_zombies_rescued_total: 'Counter',
  queue_zombies_stranded: 'Gauge',
  queue_job_duration_seconds: 'Histogram',
  deck_target_up: 'Gauge',
}

interface Rule {
  alert?: string
  record?: string
  expr: string
  for?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
}
interface RuleFile { groups: { name: string, rules: Rule[] }[] }
interface RuleTests {
  rule_files: string[]
  tests: { alert_rule_test?: { alertname: string, exp_alerts?: unknown[] }[] }[]
}
interface Target { refId: string, expr?: string, datasource?: { type?: string, uid?: string } }
interface Panel {
  id: number
  type: string
  title: string
  gridPos: { h: number, w: number, x: number, y: number }
  datasource?: { type?: string, uid?: string }
  targets?: Target[]
}
interface Dashboard {
  uid: string
  title: string
  schemaVersion: number
  refresh: string
  time: { from: string, to: string }
  panels: Panel[]
  templating: { list: { name: string, type: string, query: string }[] }
}

const read = (file: string) => fs.readFileSync(path.join(ROOT, file), 'utf8')
const rules = parse(read(RULES)) as RuleFile
const alertRules = rules.groups.flatMap(g => g.rules)
const dashboard = JSON.parse(read(DASHBOARD)) as Dashboard
const dataPanels = dashboard.panels.filter(p => p.type !== 'row')

async function promtool (...args: string[]): Promise<{ code: number | string, output: string }> {
  try {
    const { stdout, stderr } = await run('promtool', args, { cwd: ROOT })
    return { code: 0, output: stdout + stderr }
  } catch (err) {
    const e = err as { code: number | string, stdout?: string, stderr?: string }
    return { code: e.code, output: `${e.stdout ?? ''}${e.stderr ?? ''}` }
  }
}

// Not a skip: without promtool none of the rules below would be checked.
const promtoolFound = (await promtool('--version')).code !== 'ENOENT'

/** Metric names read by a PromQL expression (functions, keywords, label names and strings left out). */
function metricNames (expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
  const keywords = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset', 'atan2', 'inf', 'nan'])
  const names = new Set<string>()
  for (const m of bare.matchAll(/(?<![\w.:$])([a-zA-Z_:][\w:]*)(\s*\()?/g)) {
    if (m[2] !== undefined || keywords.has(m[1]!.toLowerCase())) continue
    names.add(m[1]!)
  }
  return [...names]
}

t.test('promtool accepts the scrape config, the rules and their unit tests', async t => {
  if (!promtoolFound) {
    t.fail('promtool is not on PATH: run `bash .ci/system-deps` (Debian package prometheus)')
    return
  }
  const config = await promtool('check', 'config', CONFIG)
  t.equal(config.code, 0, `promtool check config\n${config.output}`)
  t.match(config.output, /SUCCESS: 1 rule files found/, 'the rule_files glob picks up the rules file')
  const check = await promtool('check', 'rules', RULES)
  t.equal(check.code, 0, `promtool check rules\n${check.output}`)
  const unit = await promtool('test', 'rules', RULE_TESTS)
  t.equal(unit.code, 0, `promtool test rules\n${unit.output}`)
})

t.test('the unit tests load this rules file and cover every alert both ways', async t => {
  const spec = parse(read(RULE_TESTS)) as RuleTests
  t.same(spec.rule_files.map(f => path.resolve(ROOT, path.dirname(RULE_TESTS), f)), [path.join(ROOT, RULES)])
  const cases = spec.tests.flatMap(c => c.alert_rule_test ?? [])
  for (const name of new Set(alertRules.map(r => r.alert))) {
    t.ok(cases.some(c => c.alertname === name && (c.exp_alerts ?? []).length > 0), `${name} has a case where it fires`)
    t.ok(cases.some(c => c.alertname === name && (c.exp_alerts ?? []).length === 0), `${name} has a case where it must not fire`)
  }
})

t.test('every alert is named, routed and explained', async t => {
  t.same(rules.groups.map(g => g.name), ['watertight'])
  t.same([...new Set(alertRules.map(r => r.alert))].sort(), [...ALERTS].sort())
  for (const r of alertRules) {
    t.ok(r.alert, `a rule without alert: ${r.expr}`)
    t.match(r.labels?.severity, /^(page|ticket)$/, `${r.alert} severity`)
    t.ok(r.annotations?.summary, `${r.alert} summary`)
    t.ok(r.annotations?.description, `${r.alert} description`)
    t.match(r.annotations?.runbook, /^[^\n]{20,}$/, `${r.alert} runbook is one line`)
  }
  t.same(alertRules.filter(r => r.alert === 'LaneDown').map(r => r.labels?.severity), ['page'])
})

t.test('the metric-name extractor sees metrics, not functions, labels or keywords', async t => {
  t.same(metricNames('sum by (lane) (rate(bulkhead_rejection_total[1m])) / sum by (lane) (rate(http_request_duration_seconds_count{process!="gateway",route=~"/v1/.*"}[1m])) > 0.05').sort(),
    ['bulkhead_rejection_total', 'http_request_duration_seconds_count'])
  t.same(metricNames('(a_metric >= 5) and on (instance, lane) (max_over_time(b_metric{x="y"}[1m]) == 1) unless ignoring(le) c:recorded offset 5m'), ['a_metric', 'b_metric', 'c:recorded'])
  t.same(metricNames('max by (queue) (queue_jobz) * 1e3'), ['queue_jobz'])
})

t.test('every metric read by an alert or a panel is exported by the fleet', async t => {
  const sources = ['shared', 'services', 'gateway'].flatMap(dir =>
    fs.readdirSync(path.join(ROOT, dir), { recursive: true, encoding: 'utf8' }).filter(f => f.endsWith('.ts')).map(f => fs.readFileSync(path.join(ROOT, dir, f), 'utf8')))
  const declared = new Map<string, string>()
  for (const src of sources) for (const m of src.matchAll(/new client\.(\w+)\(\{\s*name: '(\w+)'/g)) declared.set(m[2]!, m[1]!)
  // The list is the contract dashboards and alerts rely on; the code must still declare it.
  for (const [name, type] of Object.entries(FLEET)) t.equal(declared.get(name), type, `the code declares ${type} ${name}`)

  const exported = new Set(['up'])
  for (const [name, type] of Object.entries(FLEET)) {
    exported.add(name)
    if (type === 'Histogram') for (const s of ['_bucket', '_sum', '_count']) exported.add(name + s)
    if (type === 'Summary') for (const s of ['_sum', '_count']) exported.add(name + s)
  }
  // prom-client's default process metrics, as shared/metrics.ts registers them in every process.
  const registry = new client.Registry()
  client.collectDefaultMetrics({ register: registry })
  for (const m of await registry.getMetricsAsJSON()) {
    exported.add(m.name)
    if (String(m.type) === 'histogram') for (const s of ['_bucket', '_sum', '_count']) exported.add(m.name + s)
  }
  registry.clear()

  const exprs = [
    ...alertRules.map(r => ({ where: `alert ${r.alert}`, expr: r.expr })),
    ...dataPanels.flatMap(p => (p.targets ?? []).map(x => ({ where: `panel ${p.id} "${p.title}" ${x.refId}`, expr: x.expr ?? '' }))),
  ]
  for (const { where, expr } of exprs) {
    const names = metricNames(expr)
    t.ok(names.length > 0, `${where} reads a metric`)
    for (const n of names) t.ok(exported.has(n), `${where}: ${n} is exported`)
  }
})

t.test('lane latency never mixes in the gateway\'s histogram of the same name', async t => {
  const exprs = [...alertRules.map(r => r.expr), ...dataPanels.flatMap(p => (p.targets ?? []).map(x => x.expr ?? ''))]
  const uses = exprs.filter(e => e.includes('http_request_duration_seconds'))
  t.ok(uses.length > 0)
  for (const e of uses) {
    const selectors = [...e.matchAll(/http_request_duration_seconds\w*(\{[^}]*\})?/g)]
    for (const s of selectors) t.match(s[1] ?? '', /process!?="gateway"/, e)
  }
})

t.test('the dashboard', async t => {
  t.equal(dashboard.uid, 'watertight')
  t.equal(dashboard.title, 'watertight — bulkheads')
  t.equal(dashboard.schemaVersion, 39)
  t.same(dashboard.time, { from: 'now-30m', to: 'now' })
  t.equal(dashboard.refresh, '5s')
  t.match(dashboard.templating.list.find(v => v.name === 'DS_PROMETHEUS'), { type: 'datasource', query: 'prometheus' })

  const ids = dashboard.panels.map(p => p.id)
  t.equal(new Set(ids).size, ids.length, 'panel ids are unique')

  const rows = dashboard.panels.filter(p => p.type === 'row').map(p => p.title)
  for (const lane of LANES) t.ok(rows.some(r => r.includes(lane)), `a row for lane ${lane}`)
  t.ok(rows.includes('Queues'), 'a Queues row')
  t.ok(rows.includes('Gateway'), 'a Gateway row')

  for (const p of dataPanels) {
    // eslint-disable-next-line no-template-curly-in-string -- Grafana's import placeholder, not a template
    t.match(p.datasource, { type: 'prometheus', uid: '${DS_PROMETHEUS}' }, `panel ${p.id} datasource`)
    t.ok((p.targets ?? []).length > 0 && (p.targets ?? []).every(x => (x.expr ?? '').trim() !== ''), `panel ${p.id} "${p.title}" has queries`)
  }

  // Grafana lays panels out on a 24-column grid; overlapping panels get pushed
  // around on load, and a row must span the width.
  const cells = new Map<string, number>()
  for (const p of dashboard.panels) {
    const { x, y, w, h } = p.gridPos
    t.ok(Number.isInteger(x) && Number.isInteger(y) && w > 0 && h > 0 && x >= 0 && x + w <= 24, `panel ${p.id} fits the grid`)
    if (p.type === 'row') t.same(p.gridPos, { x: 0, y, w: 24, h: 1 }, `row ${p.title} spans the width`)
    for (let i = x; i < x + w; i++) {
      for (let j = y; j < y + h; j++) {
        const other = cells.get(`${i},${j}`)
        if (other !== undefined) t.fail(`panel ${p.id} overlaps panel ${other}`)
        cells.set(`${i},${j}`, p.id)
      }
    }
  }

  // A panel copied from one lane's row and not edited would show another lane.
  let row = ''
  for (const p of [...dashboard.panels].sort((a, b) => a.gridPos.y - b.gridPos.y || a.gridPos.x - b.gridPos.x)) {
    if (p.type === 'row') { row = p.title; continue }
    const lane = LANES.find(l => row.includes(l))
    if (lane) for (const x of p.targets ?? []) t.match(x.expr, `lane="${lane}"`, `panel ${p.id} "${p.title}" in row ${row}`)
  }
})

t.test('promtool parses every dashboard query', async t => {
  if (!promtoolFound) {
    t.fail('promtool is not on PATH: run `bash .ci/system-deps` (Debian package prometheus)')
    return
  }
  // As recording rules, the queries go through promtool's PromQL parser.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wt-dashboard-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'dashboard.rules.yml')
  const records = dataPanels.flatMap(p => (p.targets ?? []).map(x => ({
    record: `dashboard:panel_${p.id}:${x.refId}`,
    expr: (x.expr ?? '').replace(/\$__(rate_interval|interval|range)\b/g, '1m'),
  })))
  fs.writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules: records }] }))
  const check = await promtool('check', 'rules', file)
  t.equal(check.code, 0, `promtool check rules (dashboard queries)\n${check.output}`)
  t.match(check.output, `SUCCESS: ${records.length} rules found`)
})
