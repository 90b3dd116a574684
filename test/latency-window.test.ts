// The lanes' one-minute latency window: quantiles within a bucket (5%) of the
// exact ones, and only the last minute counts.
import t from 'tap'
import { LatencyWindow } from '../shared/latency-window.ts'

t.test('p50 and p99 within 5% of the exact quantiles', async t => {
  const w = new LatencyWindow(() => 0)
  const xs = Array.from({ length: 10_000 }, (_, i) => 0.001 + (i % 1000) * 0.0001) // 1 ms .. 100.9 ms, uniform
  for (const x of xs) w.observe(x)
  const sorted = [...xs].sort((a, b) => a - b)
  const [p50, p99] = w.quantiles([0.5, 0.99])
  for (const [q, got] of [[0.5, p50], [0.99, p99]] as const) {
    const exact = sorted[Math.floor(q * sorted.length)]!
    t.ok(Math.abs(got! - exact) / exact <= 0.05, `p${q * 100} ${(got! * 1000).toFixed(2)} ms, exact ${(exact * 1000).toFixed(2)} ms`)
  }
})

t.test('only the last minute counts; nothing observed is null', async t => {
  let now = 0
  const w = new LatencyWindow(() => now)
  t.same(w.quantiles([0.5]), [null])
  w.observe(1)
  now = 30_000
  w.observe(0.001)
  t.ok(w.quantiles([0.99])[0]! > 0.5, 'the slow one is still in the window')
  now = 65_000
  t.ok(w.quantiles([0.99])[0]! < 0.01, 'a minute later it is gone, the fast one remains')
  now = 100_000
  t.same(w.quantiles([0.5]), [null], 'and then nothing')
})
