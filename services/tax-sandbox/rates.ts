// The sandbox's authoritative rates: the `sales-tax` package's data (countries,
// US states, Canadian provinces, with their `before` effective dates), resolved
// for a given instant the way the package itself resolves them.
import { createRequire } from 'node:module'

const requireData = createRequire(import.meta.url)
interface RateNode {
  rate?: number, type?: string, currency?: string, states?: Record<string, RateNode>, before?: Record<string, RateNode>
}
const TABLE = requireData('sales-tax/res/sales_tax_rates.json') as Record<string, RateNode>

/** The node in force at `at`: the earliest `before` date still in the future, else the current one. */
function inForce (node: RateNode, at: Date): RateNode {
  let pick: RateNode | undefined
  let pickDate: Date | undefined
  for (const [d, n] of Object.entries(node.before ?? {})) {
    const date = new Date(d)
    if (at < date && (pickDate === undefined || date < pickDate)) { pick = n; pickDate = date }
  }
  return pick ? { ...node, ...pick } : node
}

export interface ProviderRate { jurisdiction: string, rate: number, currency: string | undefined }

/** Combined rate for ISO 3166-1 `DE` or ISO 3166-2 `US-TX`; undefined when unknown. */
export function rateFor (jurisdiction: string, at = new Date()): ProviderRate | undefined {
  const [country, sub] = jurisdiction.split('-') as [string, string | undefined]
  const c = TABLE[country]
  if (!c) return undefined
  const cur = inForce(c, at)
  let rate = cur.rate ?? 0
  if (sub !== undefined) {
    const s = c.states?.[sub]
    if (!s) return undefined
    rate += inForce(s, at).rate ?? 0
  }
  return { jurisdiction, rate: Math.round(rate * 1e6) / 1e6, currency: cur.currency }
}
