// The supervisor's environment (npm start), validated at boot (main.ts);
// docs/operations.md "Supervisor" lists it, held to it by test/config-docs.test.ts.
import { Type, type Static } from 'typebox'
import { FLEET, fleetProcess } from '../../shared/fleet.ts'
import { LOG_FORMATS } from '../../shared/log-formats.ts'
import { LANE_NAMES, LANE_QUEUES } from '../../shared/lanes.ts'

export const WORKER_LANES = LANE_NAMES.filter(n => LANE_QUEUES[n].length > 0)
/** The children npm start runs, in start order. */
export const CHILD_NAMES = ['tax-sandbox', ...LANE_NAMES, ...WORKER_LANES.map(l => `worker-${l}`), 'gateway', 'deck']
/** FLEET_NODE_ARGS_TAX, FLEET_NODE_ARGS_WORKER_FRAUD, …: flags for one child only. */
export const nodeArgsVar = (child: string): string => `FLEET_NODE_ARGS_${child.toUpperCase().replaceAll('-', '_')}`

export const SUPERVISOR_ENV = Type.Object({
  DATA_DIR: Type.String({ default: '.data' }),
  DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })),
  PG_PORT: Type.Integer({ default: 54329, minimum: 1, maximum: 65535 }),
  PG_DATABASE: Type.String({ default: 'watertight', pattern: '^[a-z_][a-z0-9_]*$' }),
  GATEWAY_PORT: Type.Integer({ default: fleetProcess('gateway').port, minimum: 1, maximum: 65535 }),
  GATEWAY_REPLICAS: Type.Integer({ default: 1, minimum: 1, maximum: 16, description: 'gateway processes, on consecutive ports from GATEWAY_PORT; more than one needs REDIS_URL' }),
  REDIS_URL: Type.String({ default: '', pattern: '^(rediss?://.+)?$', description: 'the gateways\' shared retry-guard store (redis://host:port); needed for GATEWAY_REPLICAS above 1' }),
  DECK_PORT: Type.Integer({ default: fleetProcess('deck').port, minimum: 1, maximum: 65535 }),
  TAX_SANDBOX_PORT: Type.Integer({ default: fleetProcess('tax-sandbox').port, minimum: 1, maximum: 65535 }),
  WORKER_PORT: Type.Integer({ default: FLEET.find(p => p.entry === 'worker')!.port, minimum: 1, maximum: 65535, description: 'the first worker\'s port; the next worker takes the next one' }),
  QUIET: Type.Boolean({ default: false, description: 'children log errors only (their LOG_LEVEL is error)' }),
  CPU_PRIORITIES: Type.Boolean({ default: true, description: 'run P1/P2 lanes, their workers, the deck and the sandbox at a lower CPU priority' }),
  FLEET_DIST: Type.String({ default: 'dist', description: 'where the fleet is compiled to (inside the repo, so node_modules resolves)' }),
  FLEET_NODE_ARGS: Type.String({ default: '', description: 'node flags for every child, e.g. --cpu-prof --cpu-prof-dir=/tmp/prof (flags NODE_OPTIONS does not allow)' }),
  FLEET_PREBUILT: Type.Boolean({ default: false, description: 'use FLEET_DIST as it is (tests build it once for the run)' }),
  LOG_FORMAT: Type.Optional(Type.Union(LOG_FORMATS.map(f => Type.Literal(f)), { description: 'the children\'s log format; unset: pretty when stdout is a terminal, else json' })),
  // A benchmark's fault preload and heap limit on the tax lane alone (npm run bench -- compare).
  ...Object.fromEntries(CHILD_NAMES.map(c => [nodeArgsVar(c), Type.String({ default: '', description: `node flags for the ${c} child only, after FLEET_NODE_ARGS` })])),
})

/** The supervisor's settings, as loadConfig(SUPERVISOR_ENV, env) returns them. */
export type SupervisorConfig = Readonly<Static<typeof SUPERVISOR_ENV>>
