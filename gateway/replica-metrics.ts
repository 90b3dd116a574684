// Per-replica series of the gateway's lane upstreams, read at scrape time, and
// the same view for the gateway's /status. The
// replica label is the address the gateway dials, bounded by the replicas a
// lane runs; a replica gone from the lane's name goes from the series too.
import client from 'prom-client'
import type { LaneName } from '../shared/lanes.ts'
import type { Replica } from './replica-set.ts'
import type { Upstream } from './upstreams.ts'

const STATES = ['ready', 'unready', 'ejected'] as const

export interface ReplicaView {
  address: string, state: typeof STATES[number], inflight: number, requests: number, ejections: number
}

const stateOf = (r: Replica, now: number): ReplicaView['state'] => r.ejectedUntil > now ? 'ejected' : r.state === 'ready' ? 'ready' : 'unready'

/** Each lane's replicas as the gateway sees them now (its GET /status; the deck shows them). */
export function replicaViews (upstreams: Record<LaneName, Upstream>): Record<string, ReplicaView[]> {
  const now = Date.now()
  const view = (r: Replica): ReplicaView =>
    ({ address: r.address, state: stateOf(r, now), inflight: r.inflight, requests: r.requests, ejections: r.ejections })
  return Object.fromEntries(Object.values(upstreams).map(u => [u.lane, u.replicas.replicas.map(view)]))
}

export function registerReplicaMetrics (registry: client.Registry, upstreams: Record<LaneName, Upstream>): void {
  const each = (fn: (lane: LaneName, u: Upstream) => void): void => {
    for (const u of Object.values(upstreams)) fn(u.lane, u)
  }
  new client.Gauge({
    name: 'gateway_upstream_replica_inflight',
    help: 'Requests in flight to each lane replica',
    labelNames: ['lane', 'replica'],
    registers: [registry],
    collect () {
      this.reset()
      each((lane, u) => { for (const r of u.replicas.replicas) this.set({ lane, replica: r.address }, r.inflight) })
    },
  })
  new client.Gauge({
    name: 'gateway_upstream_replica_state',
    help: 'Each lane replica\'s state at the gateway (1 for the current one): ready (in rotation), unready (its /health/ready fails), ejected (after a transport error, for a bounded time)',
    labelNames: ['lane', 'replica', 'state'],
    registers: [registry],
    collect () {
      this.reset()
      const now = Date.now()
      each((lane, u) => {
        for (const r of u.replicas.replicas) {
          const state = stateOf(r, now)
          for (const s of STATES) this.set({ lane, replica: r.address, state: s }, s === state ? 1 : 0)
        }
      })
    },
  })
  new client.Counter({
    name: 'gateway_upstream_replica_requests_total',
    help: 'Requests sent to each lane replica',
    labelNames: ['lane', 'replica'],
    registers: [registry],
    collect () {
      this.reset()
      each((lane, u) => { for (const r of u.replicas.replicas) this.inc({ lane, replica: r.address }, r.requests) })
    },
  })
}
