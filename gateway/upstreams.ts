// One undici Pool per lane, built from the lane table, each with its own
// in-flight cap. A lane that is down or hung can pile up at most its cap here,
// and only its own routes fail (ERR_LANE_UNAVAILABLE); other lanes' pools and
// sockets are untouched. A full cap on a lane that answers is saturation, and
// the gateway gives the lane's own saturation answer (gateway/proxy.ts).
import type { Pool } from 'undici'
import { createOriginPool } from '../shared/lane-kit/http.ts'
import { LANE_NAMES, type LaneLimits, type LaneName } from '../shared/lanes.ts'

export interface Upstream {
  readonly lane: LaneName
  readonly cap: number
  readonly pool: Pool
  inflight: number
  /**
   * Whether the lane answered the last request that ended (any status), as
   * opposed to failing at the transport (refused, reset, timed out). Starts
   * true: a lane is presumed up until a request to it fails.
   */
  reachable: boolean
}

/**
 * The most a lane's answer may hold: the gateway reads each answer whole before
 * it answers (gateway/proxy.ts), so this bounds what one request can make it hold.
 * The lanes' answers are small JSON documents (a few KB at most).
 */
export const LANE_ANSWER_MAX_BYTES = 1024 * 1024

export function createUpstreams (limits: Record<LaneName, LaneLimits>, urls: Record<LaneName, string>): Record<LaneName, Upstream> {
  const out = {} as Record<LaneName, Upstream>
  for (const lane of LANE_NAMES) {
    const l = limits[lane]
    // The lane cuts its own work at its deadline; the gateway waits a little longer
    // so the lane's 504 (not a gateway timeout) reaches the client.
    const timeoutMs = l.deadlineMs + 1_000
    out[lane] = {
      lane,
      cap: l.gateway.inflightCap,
      inflight: 0,
      reachable: true,
      pool: createOriginPool(urls[lane], { connections: l.gateway.inflightCap, timeoutMs, connectTimeoutMs: 1_000, maxResponseBytes: LANE_ANSWER_MAX_BYTES }),
    }
  }
  return out
}

export async function closeUpstreams (ups: Record<LaneName, Upstream>): Promise<void> {
  await Promise.all(Object.values(ups).map(u => u.pool.close().catch(() => u.pool.destroy())))
}
