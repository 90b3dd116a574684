// @ts-check
// The five-minute chart: card-auth p99 and tax rejections/s. uPlot is a classic
// script (/vendor/uplot.js, its IIFE build) that runs before the modules, so
// it is read from window rather than imported.
import { $ } from './dom.js'

/** @type {any} */
let chart = null

/**
 * A uPlot scale range from zero to a little over the highest point, never under `floor`.
 * @param {number} floor
 */
const fromZero = floor => (/** @type {any} */ _u, /** @type {number} */ _min, /** @type {number} */ max) =>
  [0, Math.max(floor, max * 1.1)]

/** @param {any[]} points */
export function renderTimeline (points) {
  const xs = points.map(p => p.t / 1000)
  const p99 = points.map(p => p.lanes['card-auth']?.p99Ms ?? null)
  const rej = points.map(p => p.lanes.tax?.rejectionsPerSecond ?? null)
  const data = [xs, p99, rej]
  const box = $('timeline')
  // @ts-expect-error uPlot is loaded by its own script tag
  const UPlot = window.uPlot
  if (!chart) {
    chart = new UPlot({
      width: Math.max(320, box.clientWidth),
      height: 240,
      scales: { x: { time: true }, ms: { auto: true, range: fromZero(10) }, rps: { auto: true, range: fromZero(5) } },
      series: [
        {},
        { label: 'card-auth p99 (ms)', scale: 'ms', stroke: '#58a6ff', width: 2, spanGaps: false },
        { label: 'tax rejections/s', scale: 'rps', stroke: '#f85149', width: 2, fill: 'rgba(248,81,73,0.12)' },
      ],
      axes: [
        { stroke: '#8b98a5', grid: { stroke: '#26313d' } },
        { scale: 'ms', stroke: '#58a6ff', grid: { stroke: '#26313d' }, label: 'ms' },
        { scale: 'rps', side: 1, stroke: '#f85149', grid: { show: false }, label: 'rejections/s' },
      ],
    }, data, box)
    window.addEventListener('resize', () => chart?.setSize({ width: Math.max(320, box.clientWidth), height: 240 }))
  } else {
    chart.setData(data)
  }
}

export function clearTimeline () {
  $('timeline').replaceChildren()
  chart?.destroy()
  chart = null
}
