// Who a request's tenant is for the lane's fair admission (shared/bulkhead.ts),
// and how a refusal by fairness is told to the caller. The tenant is read after
// the body is validated, so `merchantId` is the one the route will use.
import type { FastifyRequest } from 'fastify'
import type { AppError } from '../errors.ts'
import type { FairShare } from '../bulkhead.ts'
import { saturationError, type FairBy, type LaneLimits } from '../lanes.ts'

/** The request's tenant under `by` ('' for all: the plain FIFO bulkhead). */
export function tenantOf (by: FairBy, req: FastifyRequest): string {
  if (by === 'off') return ''
  const client = req.headers['x-client-id']
  const clientId = typeof client === 'string' ? client : ''
  if (by === 'client') return clientId
  const merchant = (req.body as { merchantId?: unknown } | undefined)?.merchantId
  // A request with no merchant (a read by id) counts for its API client, apart from any merchant's.
  return typeof merchant === 'string' ? merchant : `client:${clientId}`
}

const WHO: Record<FairBy, string> = { merchant: 'merchant', client: 'API client', off: 'tenant' }

/**
 * The sentence a refused caller reads: the load its merchant (or client) had
 * and its fair share then, so an integration stuck in a loop sees that it is
 * the one over its share. Undefined when no other tenant was in flight.
 */
export function fairDetail (by: FairBy, permits: number, fair: FairShare | undefined): string | undefined {
  if (!fair || by === 'off') return undefined
  const who = `${WHO[by]} ${fair.tenant.startsWith('client:') ? `(API client ${fair.tenant.slice(7)})` : fair.tenant}`
  const share = `its fair share is ${roundShare(fair.share)} of the ${permits} permits while ${fair.tenants} ${WHO[by]}s are in flight`
  const load = `${fair.held} permit${fair.held === 1 ? '' : 's'} and ${fair.queued} queue place${fair.queued === 1 ? '' : 's'}`
  if (fair.displaced) return `${who} held ${load} when this request gave its queue place to one holding less; ${share}`
  return `${who} holds ${load}; ${share}`
}

/** The problem's `fairShare` extension: machine-readable, the same figures. */
function fairExtension (fair: FairShare | undefined): Record<string, unknown> {
  if (!fair) return {}
  return {
    fairShare: {
      tenant: fair.tenant,
      held: fair.held,
      queued: fair.queued,
      share: roundShare(fair.share),
      tenants: fair.tenants,
      displaced: fair.displaced,
    },
  }
}

/** The lane's saturation answer (`why`), with its tenant's load and fair share when others were in flight. */
export function fairSaturationError (limits: LaneLimits, why: string, fair: FairShare | undefined): AppError {
  const share = fairDetail(limits.fair.by, limits.permits, fair)
  return saturationError(limits.lane, share ? `${why}; ${share}` : why, { name: limits.lane, quota: limits.permits }, fairExtension(fair))
}

/** A share as shown: one decimal. */
export const roundShare = (x: number): number => Math.round(x * 10) / 10
