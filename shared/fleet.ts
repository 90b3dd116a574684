// The fleet's long-running processes in one table: what each runs, where it
// listens by default, the PostgreSQL role it connects as, its CPU priority on
// a shared host and its health routes. `npm start` (services/supervisor),
// the image's health check (services/healthcheck.ts) and the deck's targets
// read it; test/ops-compose.test.ts and test/ops-k8s.test.ts hold Compose and
// Kubernetes to it. The lanes' own numbers stay in the lane table (lanes.ts),
// which this one reads.
import { DECK_ROLE, JOBS_ROLE, LANE_DEFAULTS, LANE_NAMES, LANE_QUEUES, envPrefix, type LaneName } from './lanes.ts'

export type Priority = 'P0' | 'P1' | 'P2' | 'admin' | 'external'

export interface FleetProcess {
  /** Service, Deployment and child name. */
  readonly name: string
  /** The image's process (`node dist/services/main.js <entry>`). */
  readonly entry: string
  readonly portEnv: string
  /** Default listen port (a second worker on one host takes the next ones). */
  readonly port: number
  readonly hostEnv: string
  /** Default listen address: only the gateway listens beyond loopback unless told. */
  readonly host: string
  /** The PostgreSQL role of its DATABASE_URL (undefined: it holds no pool). */
  readonly role?: string
  /** The lane whose jobs a worker runs (with that lane's role as well). */
  readonly lane?: LaneName
  readonly priority: Priority
  readonly health: { readonly live: string, readonly ready?: string }
}

/**
 * Nice levels where the fleet shares one host's cores (`npm start`): the OS
 * scheduler favours the P0 path (gateway, card-auth) over P1 and P2 work, so a
 * busy tax lane slows itself, not card authorizations. The stand-in provider
 * must not compete with the fleet either. Compose and Kubernetes give each
 * process its own CPU instead.
 */
export const NICE: Readonly<Record<Priority, number>> = Object.freeze({ P0: 0, P1: 5, P2: 10, admin: 5, external: 10 })

const HEALTH = Object.freeze({ live: '/health/live', ready: '/health/ready' })
const WORKER_PORT = 8104

export const FLEET: readonly FleetProcess[] = Object.freeze(([
  { name: 'gateway', entry: 'gateway', portEnv: 'GATEWAY_PORT', port: 8080, hostEnv: 'GATEWAY_HOST', host: '0.0.0.0', priority: 'P0', health: HEALTH },
  ...LANE_NAMES.map((lane): FleetProcess => ({
    name: lane,
    entry: lane,
    portEnv: `${envPrefix(lane)}PORT`,
    port: LANE_DEFAULTS[lane].port,
    hostEnv: `${envPrefix(lane)}HOST`,
    host: '127.0.0.1',
    role: LANE_DEFAULTS[lane].role,
    priority: LANE_DEFAULTS[lane].priority,
    health: HEALTH,
  })),
  // One worker per lane that owns queues: its async work runs apart from other lanes' too.
  ...LANE_NAMES.filter(lane => LANE_QUEUES[lane].length > 0).map((lane): FleetProcess => ({
    name: `worker-${lane}`,
    entry: 'worker',
    portEnv: 'WORKER_PORT',
    port: WORKER_PORT,
    hostEnv: 'WORKER_HOST',
    host: '127.0.0.1',
    role: JOBS_ROLE.role,
    lane,
    priority: LANE_DEFAULTS[lane].priority,
    health: HEALTH,
  })),
  { name: 'deck', entry: 'deck', portEnv: 'DECK_PORT', port: 9090, hostEnv: 'DECK_HOST', host: '127.0.0.1', role: DECK_ROLE.role, priority: 'admin', health: HEALTH },
  // The stand-in third-party tax API (demo image only): nothing to be unready for.
  { name: 'tax-sandbox', entry: 'tax-sandbox', portEnv: 'TAX_SANDBOX_PORT', port: 8190, hostEnv: 'TAX_SANDBOX_HOST', host: '127.0.0.1', priority: 'external', health: { live: HEALTH.live } },
] satisfies FleetProcess[]).map(p => Object.freeze(p)))

export function fleetProcess (name: string): FleetProcess {
  const p = FLEET.find(x => x.name === name)
  if (!p) throw new Error(`no process ${name} in the fleet table`)
  return p
}
