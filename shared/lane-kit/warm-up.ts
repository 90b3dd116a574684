// A lane replica is ready only once it is warm: its pool opened and its hot
// path run once. A balancer (the gateway's health checks, a Kubernetes
// readiness probe) then sends it traffic that finds connections open and the
// route's code compiled, instead of paying for both in the first requests.
import type { FastifyInstance, FastifyRequest } from 'fastify'

/**
 * Marks a warm-up's request, which the lane's metrics leave out: the lane's own
 * read, and the gateway's warm-up authorizations (gateway/warm-up.ts), which
 * card-auth's writer rehearses and rolls back. The gateway sends a lane only
 * the headers it names (gateway/proxy.ts), this one on every request: `1` on
 * its own warm-up's, `0` on a client's. A header only the warm-up's requests
 * carried would give their `req.headers` another hidden class than a client's,
 * and the first client request would throw away the code V8 compiled on them.
 */
export const WARM_UP_HEADER = 'x-watertight-warm-up'

/** Whether `req` is a warm-up's (its WARM_UP_HEADER is `1`). */
export const isWarmUpRequest = (req: FastifyRequest): boolean => req.headers[WARM_UP_HEADER] === '1'

export class WarmUp {
  // In-process apps (tests, tools) are ready at once; lane-main begins a warm-up.
  #done = true
  get done (): boolean { return this.#done }
  begin (): void { this.#done = false }
  finish (): void { this.#done = true }
}

/**
 * The lane's hot path, once: its read route for an id no row has, through the
 * whole app (routing, validation, admission, a pooled connection, the query).
 * Resolves with the status (404 expected), or 0 if it could not run.
 */
export async function exercise (app: FastifyInstance, path: string): Promise<number> {
  try {
    return (await app.inject({ method: 'GET', url: path, headers: { 'x-client-id': 'warm-up', [WARM_UP_HEADER]: '1' } })).statusCode
  } catch {
    return 0
  }
}
