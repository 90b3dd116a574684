// Outbound HTTP of a lane: one undici Pool per upstream, owned by the lane that
// calls it (never module-level, never shared across lanes), with connection
// count bounded by the lane's permits so a slow upstream can hold no more
// sockets than the lane has executions.
import { Pool } from 'undici'
import type { LaneLimits } from '../lanes.ts'

export function createUpstreamPool (origin: string, limits: LaneLimits, opts: { timeoutMs: number }): Pool {
  return new Pool(origin, {
    connections: limits.permits,
    pipelining: 1,
    connectTimeout: Math.min(opts.timeoutMs, 5_000),
    headersTimeout: opts.timeoutMs,
    bodyTimeout: opts.timeoutMs,
    keepAliveTimeout: 4_000,
  })
}
