// Before anything is recorded: a warm-up that brings a cold fleet to speed, then
// a wait until every lane is NORMAL again.
import type { Pool } from 'undici'
import { runOpenLoop } from '../open-loop.ts'
import { sleep } from '../run-info.ts'
import type { DeckLanes, DrillClients } from './clients.ts'
import type { DrillOptions } from './options.ts'
import { cardBody } from './streams.ts'

type WarmupOptions = Pick<DrillOptions, 'warmupSeconds' | 'cardRate' | 'taxRate'>

/** A cold fleet (JIT, pools, caches) at a gentle rate, then at the full rates; not recorded. */
export async function warmUp (c: DrillClients, o: WarmupOptions, runId: string): Promise<void> {
  if (o.warmupSeconds <= 0) return
  // Tax starts at 5 req/s: a cold tax lane (15 permits, no queue) saturated at 30 req/s
  // in its first seconds on this machine, and then needs its 10 s recovery window.
  const gentle = { card: Math.min(o.cardRate, 150), tax: Math.min(o.taxRate, 5) }
  console.log(`warm-up ${o.warmupSeconds} s, not recorded: half at ${gentle.card} card + ${gentle.tax} tax req/s (a cold fleet: JIT, pools), half at the full rates`)
  const warm = async (p: Pool, path: string, key: string, body: unknown): Promise<number> => {
    const r = await c.post(p, path, key, body)
    await r.body.dump()
    return r.statusCode
  }
  let w = 0
  const durationMs = o.warmupSeconds * 500
  for (const [cardRate, taxRate] of [[gentle.card, gentle.tax], [o.cardRate, o.taxRate]] as const) {
    await Promise.all([
      runOpenLoop({
        rate: cardRate,
        durationMs,
        send: () => {
          const j = w++
          return warm(c.cardPool, '/v1/authorizations', `drill-${runId}-wc-${j}`, cardBody(j)).catch(() => 0)
        },
      }),
      runOpenLoop({
        rate: taxRate,
        durationMs,
        send: () => warm(c.taxPool, '/v1/tax/quotes', `drill-${runId}-wt-${w++}`, {
          jurisdiction: 'DE',
          amount: { value: 10_000, currency: 'EUR' },
        }).catch(() => 0),
      }),
    ])
  }
}

/**
 * The baseline starts from a fleet whose lanes are all NORMAL; resolves to the
 * ms that took. A lane the warm-up pushed into SATURATED (a cold process on a
 * slow host) is RECOVERING until its active permits stay low for the recovery
 * window (10 s); a baseline begun then would measure the warm-up, and the
 * fault's transitions would start mid-way. No load runs while the drill waits.
 */
export async function settle (c: DrillClients, o: Pick<DrillOptions, 'settleTimeoutSeconds'>): Promise<number> {
  const from = performance.now()
  let firstNotNormal: string[] | undefined
  for (;;) {
    const notNormal = notNormalLanes(await c.lanes())
    firstNotNormal ??= notNormal
    if (notNormal.length === 0) break
    if (performance.now() - from > o.settleTimeoutSeconds * 1000) throw new Error(`lanes not NORMAL ${o.settleTimeoutSeconds} s after the warm-up: ${notNormal.join(', ')}`)
    await sleep(250)
  }
  const settledMs = Math.round(performance.now() - from)
  console.log(`every lane NORMAL ${settledMs} ms after the warm-up${firstNotNormal.length ? ` (it left ${firstNotNormal.join(', ')})` : ''}`)
  return settledMs
}

/** "tax SATURATED", "fraud down": each lane not up and NORMAL. */
function notNormalLanes (v: DeckLanes): string[] {
  return v.lanes.filter(l => !l.up || l.status?.state !== 'NORMAL').map(l => `${l.name} ${l.up ? l.status?.state : 'down'}`)
}
