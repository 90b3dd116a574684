// The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers) and
// the problem member that names the violated policy, in one place for every
// answer that refuses on a quota or on capacity. Retry-After, when the error
// carries one, still wins for the client (DESIGN §3).

export interface RateLimitPolicy {
  /** Policy name, also the `violated-policies` entry. */
  name: string
  /** Quota: requests (or permits) the policy allows per window. */
  quota: number
  /** Window in seconds. */
  windowSeconds: number
  /** Seconds until the client may expect room again. */
  resetSeconds: number
}

export function rateLimitFields (
  p: RateLimitPolicy
): { headers: Record<string, string>, extensions: Record<string, unknown> } {
  const t = Math.max(0, Math.ceil(p.resetSeconds))
  return {
    headers: { 'ratelimit-policy': `"${p.name}";q=${p.quota};w=${Math.max(1, Math.ceil(p.windowSeconds))}`, ratelimit: `"${p.name}";r=0;t=${t}` },
    extensions: { 'violated-policies': [p.name] },
  }
}
