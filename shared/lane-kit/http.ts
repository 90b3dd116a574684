// Outbound HTTP of a lane: one undici Pool per upstream, owned by the lane that
// calls it (never module-level, never shared across lanes), with connection
// count bounded by the lane's permits so a slow upstream can hold no more
// sockets than the lane has executions.
import { Agent, Client, Pool } from 'undici'
import type { LaneLimits } from '../lanes.ts'

export function createUpstreamPool (origin: string, limits: LaneLimits, opts: { timeoutMs: number }): Pool {
  return createOriginPool(origin, { connections: limits.permits, timeoutMs: opts.timeoutMs })
}

/**
 * An HTTP client for one caller that talks to a few origins (the deck's
 * probes, the certification tool): its own sockets, bounded, never undici's
 * global dispatcher, which every module in a process would share.
 */
export function createHttpAgent (o: { connections: number, timeoutMs: number }): Agent {
  return new Agent({
    connections: o.connections,
    connectTimeout: o.timeoutMs,
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    keepAliveTimeout: 4_000,
  })
}

/**
 * A pool to one origin with its own sockets, `connections` at most: the
 * gateway's pool per lane (capped at the lane's in-flight cap), a worker's
 * provider client.
 */
export function createOriginPool (
  origin: string, o: { connections: number, timeoutMs: number, connectTimeoutMs?: number, maxResponseBytes?: number }
): Pool {
  return new Pool(origin, {
    connections: o.connections,
    pipelining: 1,
    connectTimeout: o.connectTimeoutMs ?? Math.min(o.timeoutMs, 5_000),
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    keepAliveTimeout: 4_000,
    maxResponseSize: o.maxResponseBytes ?? -1,
  })
}

/**
 * Whether `origin` answers its /health/ready with 200 within `timeoutMs`: the
 * gateway's active check of a lane replica, on a connection of its own (opened
 * and closed per check), so a replica whose pool is busy is not failed for it.
 */
export async function probeReady (origin: string, timeoutMs: number): Promise<boolean> {
  const client = new Client(origin, { connectTimeout: timeoutMs, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
  try {
    const r = await client.request({ method: 'GET', path: '/health/ready', signal: AbortSignal.timeout(timeoutMs) })
    await r.body.dump()
    return r.statusCode === 200
  } catch {
    return false
  } finally {
    client.destroy().catch(() => {})
  }
}
