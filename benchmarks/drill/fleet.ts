// The fleet under test: one the drill starts itself (its own data directory
// and ports, and the tax lane's fault preload when the fault is in its code),
// or one given by --gateway/--deck.
import fs from 'node:fs'
import path from 'node:path'
import { compilePreload, FaultSwitch, taxNodeArgs } from '../faults/control.ts'
import { pinSelf, startLocalFleet } from '../local-fleet.ts'
import type { DrillOptions, OwnFleet } from './options.ts'

export interface FleetUnderTest {
  gatewayUrl: string
  deckUrl: string
  apiKey: string
  adminToken: string
  databaseUrl: string
  /** The tax sandbox and worker-tax: a fleet started here only. */
  sandboxUrl?: string
  workerTaxUrl?: string
  /** The supervisor's pid: a fleet started here only. */
  pid?: number
  pinned: string | undefined
  pinnedProcesses: number
  own: boolean
  /** The tax lane's fault switch, for a fault in its own code. */
  codeFault?: FaultSwitch
  stop (): Promise<void>
}

export async function fleetUnderTest (o: DrillOptions): Promise<FleetUnderTest> {
  if (o.fleet.kind === 'external') {
    const { gatewayUrl, deckUrl, apiKey, adminToken, databaseUrl } = o.fleet
    return {
      gatewayUrl,
      deckUrl,
      apiKey,
      adminToken,
      databaseUrl,
      stop: async () => {},
      pinned: undefined,
      pinnedProcesses: 0,
      own: false,
    }
  }
  return startOwnFleet(o, o.fleet)
}

async function startOwnFleet (o: DrillOptions, f: OwnFleet): Promise<FleetUnderTest> {
  const dir = path.resolve(f.dataDir)
  // Each run starts from an empty database. A previous run's data was load and state
  // this one did not make: its ~20,000 compensated quotes left as many reconcile jobs,
  // which the tax worker drains at 10/s for half an hour, through the next runs'
  // baselines. The default directory is the drill's own and is emptied at the start
  // (the last run's data stays there to look at until the next); one given with
  // --data-dir is used as it is.
  if (f.emptyDataDir) fs.rmSync(dir, { recursive: true, force: true })
  const codeFault = o.fault === 'slow-provider'
    ? undefined
    : (fs.mkdirSync(dir, { recursive: true }), new FaultSwitch(path.resolve(dir, 'tax-fault.json')))
  // A fault in the tax lane's code: the preload and a heap limit on the tax lane alone.
  const code = codeFault
    ? { ...codeFault.env, FLEET_NODE_ARGS_TAX: taxNodeArgs(compilePreload(dir), o.taxHeapMb).join(' ') }
    : {}
  const fleet = await startLocalFleet({
    dataDir: f.dataDir,
    basePort: f.basePort,
    cpus: f.fleetCpus,
    // The deck polls every 500 ms, each lane under a 500 ms deadline (the deck's
    // default): the recovery time is read from it. At 250 / 200 ms a P2 lane starved of
    // CPU at the spec's rates, slow rather than gone, timed out in 640 of 643 polls and
    // its state was never seen. A slow answer is timed when it came back (sampler.ts).
    env: { DECK_POLL_MS: '500', DECK_TARGET_TIMEOUT_MS: '500', ...code },
  })
  return { ...fleet, own: true, codeFault }
}

/** Pins this process, the load generator, when asked and the fleet is this machine's. */
export function pinGenerator (o: DrillOptions, fleet: FleetUnderTest): boolean {
  return o.fleet.kind === 'own' && fleet.own && o.fleet.generatorCpus ? pinSelf(o.fleet.generatorCpus) : false
}

/** Where the fleet and the generator ran, for the report. */
export function placement (o: DrillOptions, fleet: FleetUnderTest, generatorPinned: boolean): string {
  if (!fleet.own || o.fleet.kind !== 'own') return `fleet at ${fleet.gatewayUrl} (not started here)`
  const pgOutside = Boolean(process.env.DATABASE_URL)
  const what = `${pgOutside ? '' : 'PostgreSQL, '}gateway, lanes, workers, deck, sandbox${pgOutside ? '; PostgreSQL at DATABASE_URL, not pinned' : ''}`
  const fleetPin = fleet.pinned !== undefined ? `pinned to cpu ${fleet.pinned} (${fleet.pinnedProcesses} processes, once up)` : o.fleet.fleetCpus ? 'not pinned (no taskset)' : 'not pinned'
  return `fleet (${what}) ${fleetPin}, generator ${generatorPinned ? `pinned to cpu ${o.fleet.generatorCpus}` : 'not pinned'}`
}
