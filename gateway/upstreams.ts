// One upstream per lane, built from the lane table: the lane's replicas
// (replica-set.ts), each with its own undici Pool and in-flight cap. A lane
// that is down or hung can pile up at most its caps here, and only its own
// routes fail (ERR_LANE_UNAVAILABLE); other lanes' pools and sockets are
// untouched. Every replica at its cap on a lane that answers is saturation, and
// the gateway gives the lane's own saturation answer (gateway/proxy.ts).
import { LANE_NAMES, type LaneLimits, type LaneName } from '../shared/lanes.ts'
import { ReplicaSet, type Replica } from './replica-set.ts'

export interface Upstream {
  readonly lane: LaneName
  /** Requests in flight to one replica at most. */
  readonly cap: number
  readonly replicas: ReplicaSet
  readonly inflight: number
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

export interface BalancingOptions {
  resolveEveryMs: number
  checkEveryMs: number
  ejectMs: number
  ejectMaxMs: number
  slowStartMs: number
  onChange?: (lane: LaneName, r: Replica, what: string) => void
}

export const BALANCING_DEFAULTS: BalancingOptions = Object.freeze({
  resolveEveryMs: 5_000, checkEveryMs: 2_000, ejectMs: 2_000, ejectMaxMs: 30_000, slowStartMs: 10_000,
})

export function createUpstreams (
  limits: Record<LaneName, LaneLimits>, urls: Record<LaneName, string>, b: BalancingOptions = BALANCING_DEFAULTS
): Record<LaneName, Upstream> {
  const out = {} as Record<LaneName, Upstream>
  for (const lane of LANE_NAMES) {
    const l = limits[lane]
    const replicas = new ReplicaSet({
      lane,
      url: urls[lane],
      cap: l.gateway.inflightCap,
      // The lane cuts its own work at its deadline; the gateway waits a little longer
      // so the lane's 504 (not a gateway timeout) reaches the client.
      pool: { timeoutMs: l.deadlineMs + 1_000, connectTimeoutMs: 1_000, maxResponseBytes: LANE_ANSWER_MAX_BYTES },
      resolveEveryMs: b.resolveEveryMs,
      checkEveryMs: b.checkEveryMs,
      ejectMs: b.ejectMs,
      ejectMaxMs: b.ejectMaxMs,
      slowStartMs: b.slowStartMs,
      ...(b.onChange ? { onChange: (r: Replica, what: string) => b.onChange!(lane, r, what) } : {}),
    })
    out[lane] = {
      lane, cap: l.gateway.inflightCap, replicas, reachable: true, get inflight () { return replicas.inflight },
    }
  }
  return out
}

export async function startUpstreams (ups: Record<LaneName, Upstream>): Promise<void> {
  await Promise.all(Object.values(ups).map(u => u.replicas.start()))
}

export async function closeUpstreams (ups: Record<LaneName, Upstream>): Promise<void> {
  await Promise.all(Object.values(ups).map(u => u.replicas.close()))
}
