// A self-contained HTML report: tables and uPlot timeline charts, with uPlot's
// script and stylesheet inlined so the file opens anywhere, offline, alone.
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'

export interface Series { label: string, values: Array<number | null>, color: string, dash?: boolean }
export interface Chart { title: string, yLabel: string, x: number[], series: Series[], log?: boolean, step?: boolean }
export interface Table { title: string, head: string[], rows: Array<Array<string | number>>, passColumn?: number }
export interface Band { from: number, to: number, label: string }

const esc = (s: unknown): string => String(s).replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!)

function uplotAssets (): { js: string, css: string } {
  const require = createRequire(import.meta.url)
  const dir = path.dirname(require.resolve('uplot/dist/uPlot.iife.min.js'))
  return { js: fs.readFileSync(path.join(dir, 'uPlot.iife.min.js'), 'utf8'), css: fs.readFileSync(path.join(dir, 'uPlot.min.css'), 'utf8') }
}

function table (t: Table): string {
  const rows = t.rows.map(r => `<tr>${r.map((c, i) => {
    const cls = i === t.passColumn ? (c === 'pass' ? ' class="pass"' : ' class="fail"') : ''
    return `<td${cls}>${esc(c)}</td>`
  }).join('')}</tr>`).join('\n')
  return `<h2>${esc(t.title)}</h2>\n<table><thead><tr>${t.head.map(h => `<th>${esc(h)}</th>`).join('')}</tr></thead>\n<tbody>${rows}</tbody></table>`
}

export function renderReport (o: {
  title: string
  subtitle: string[]
  verdict?: { pass: boolean, text: string }
  tables: Table[]
  charts: Chart[]
  bands: Band[]
}): string {
  const { js, css } = uplotAssets()
  // JSON inside <script>: no "</script>" or "<!--" can survive \u003c.
  const data = JSON.stringify({ charts: o.charts, bands: o.bands }).replace(/</g, '\\u003c')
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(o.title)}</title>
<style>${css}
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;max-width:1100px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef}td.pass{color:#06702d;font-weight:600}td.fail{color:#b00020;font-weight:600}
.verdict{font-size:18px;font-weight:700;padding:8px 12px;display:inline-block;border-radius:4px}
.verdict.pass{background:#dff5e5;color:#06702d}.verdict.fail{background:#fde2e6;color:#b00020}
.chart{margin:10px 0 26px}.muted{color:#667}
</style></head><body>
<h1>${esc(o.title)}</h1>
${o.subtitle.map(s => `<p class="muted">${esc(s)}</p>`).join('\n')}
${o.verdict ? `<p class="verdict ${o.verdict.pass ? 'pass' : 'fail'}">${esc(o.verdict.text)}</p>` : ''}
${o.tables.map(table).join('\n')}
<h2>Timeline</h2>
<p class="muted">Shaded: ${o.bands.map(b => esc(b.label)).join(', ') || 'nothing'}. x = seconds since the load started.</p>
<div id="charts"></div>
<script>${js}</script>
<script>
const DATA = ${data};
const shade = u => {
  const ctx = u.ctx; ctx.save(); ctx.fillStyle = 'rgba(220,40,40,0.08)';
  for (const b of DATA.bands) {
    const x0 = u.valToPos(b.from, 'x', true), x1 = u.valToPos(b.to, 'x', true);
    ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
  }
  ctx.restore();
};
for (const c of DATA.charts) {
  const div = document.createElement('div'); div.className = 'chart';
  document.getElementById('charts').appendChild(div);
  const series = [{ label: 's' }].concat(c.series.map(s => ({ label: s.label, stroke: s.color, width: 1.5, dash: s.dash ? [6, 4] : undefined, paths: c.step ? uPlot.paths.stepped({ align: 1 }) : undefined, spanGaps: false })));
  new uPlot({ title: c.title, width: 1040, height: 260, series,
    scales: { x: { time: false }, y: c.log ? { distr: 3 } : {} },
    axes: [{ label: 'seconds' }, { label: c.yLabel, size: 70 }],
    hooks: { drawClear: [shade] } }, [c.x].concat(c.series.map(s => s.values)), div);
}
</script>
</body></html>
`
}
