// A small HTTP client for tests on undici: JSON in, status/headers/JSON out.
import { setTimeout as sleep } from 'node:timers/promises'
import { Agent, request } from 'undici'
import { serverTiming } from '../../benchmarks/run-info.ts'

export const agent = new Agent({ connections: 512, pipelining: 1 })

export interface Res { status: number, headers: Record<string, string>, body: any, ms: number }

export async function call (url: string, opts: {
  method?: string
  headers?: Record<string, string>
  json?: unknown
  raw?: string | Buffer
  signal?: AbortSignal
} = {}): Promise<Res> {
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

export { sleep }

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
 * A duration in an answer's Server-Timing (`admit`, `inproc`, `answer` from the
 * lane; `gateway`), ms; NaN when absent.
 */
export function timing (r: Res, name: string): number {
  return serverTiming(r.headers['server-timing'], name) ?? NaN
}

/** The admission decision a lane reported in Server-Timing (`admit;desc="<reason>"`), or undefined. */
export function admitReason (r: Res): string | undefined {
  return /admit;desc="([a-z_]+)"/.exec(r.headers['server-timing'] ?? '')?.[1]
}

/**
 * INV-BH-02 (a rejection is decided at once, never after a wait), shown by what
 * the lane decided rather than by a clock: every answer named here was shed by
 * the decision taken on arrival (`queue_full`, or `fail_fast` for a lane with no
 * queue), none after waiting in the queue (`queue_timeout`). The decision's
 * time is a benchmark figure (npm run drill reports it), not a test assertion.
 */
export function assertShedOnArrival (t: { ok: (v: unknown, m: string) => unknown }, shed: Res[], what: string): void {
  const reasons = shed.map(admitReason)
  const other = reasons.filter(r => r !== 'queue_full' && r !== 'fail_fast')
  t.ok(shed.length > 0 && other.length === 0, `${what}: all ${shed.length} decided on arrival, none after a wait (others: ${JSON.stringify(other.slice(0, 5))})`)
}
