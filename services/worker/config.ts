// The worker's environment, validated at boot (main.ts); docs/operations.md
// "Worker" lists it, held to it by test/config-docs.test.ts.
import { Type } from 'typebox'
import { LEAK_DETECTION_DEFAULT_MS } from '../../shared/db/leak-detection.ts'
import { START_BUDGET_MS } from '../../shared/db/pool.ts'
import { JOBS_ROLE } from '../../shared/lanes.ts'

export const WORKER_ENV = Type.Object({
  DATABASE_URL: Type.String({ minLength: 1 }),
  WORKER_QUEUES: Type.String({ default: '' }),
  WORKER_SLOTS: Type.Integer({ default: 20, minimum: 1, maximum: 1_000 }),
  WORKER_PORT: Type.Integer({ default: 8104, minimum: 0, maximum: 65535 }),
  WORKER_HOST: Type.String({ default: '127.0.0.1' }),
  WORKER_POLL_MS: Type.Integer({ default: 1_000, minimum: 10, maximum: 60_000 }),
  WORKER_HEARTBEAT_MS: Type.Integer({ default: 2_000, minimum: 10, maximum: 60_000 }),
  WORKER_RESCUE_MS: Type.Integer({ default: 5_000, minimum: 10, maximum: 600_000 }),
  WORKER_BACKOFF_BASE_MS: Type.Integer({ default: 1_000, minimum: 1, maximum: 600_000 }),
  WORKER_BACKOFF_CAP_MS: Type.Integer({ default: 300_000, minimum: 1, maximum: 86_400_000 }),
  // Vacuum jobs_hot after this many jobs claimed by this worker (and at most once per WORKER_VACUUM_MIN_MS); 0 = never.
  WORKER_VACUUM_EVERY_JOBS: Type.Integer({ default: 2_000, minimum: 0, maximum: 10_000_000 }),
  WORKER_VACUUM_MIN_MS: Type.Integer({ default: 1_000, minimum: 0, maximum: 3_600_000 }),
  // The jobs_ds role's fleet-wide CONNECTION LIMIT, shared by every worker process.
  JOBS_POOL_MAX: Type.Integer({ default: JOBS_ROLE.poolMax, minimum: 2, maximum: 1_000 }),
  WORKER_REPLICAS: Type.Integer({ default: 1, minimum: 1, maximum: 1_000 }),
  WORKER_POOL_MAX: Type.Optional(Type.Integer({ minimum: 1, maximum: 1_000 })),
  // How long start-up waits for the database (down, or a role's CONNECTION LIMIT full) before it exits; 0 = one try.
  WORKER_START_BUDGET_MS: Type.Integer({ default: START_BUDGET_MS, minimum: 0, maximum: 3_600_000 }),
  // DEC-BH-01 on the queue pool (the lane pools use their lane's <LANE>_LEAK_DETECTION_MS); 0 = off.
  WORKER_LEAK_DETECTION_MS: Type.Integer({ default: LEAK_DETECTION_DEFAULT_MS, minimum: 0, maximum: 600_000 }),
})
