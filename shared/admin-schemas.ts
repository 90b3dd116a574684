// Admin-plane schemas, shared by the deck (which validates operators' input)
// and the tax sandbox (which owns the fault model the deck forwards to).
import { Type, type Static } from 'typebox'

export const SandboxFaults = Type.Object({
  latencyMs: Type.Integer({ minimum: 0, maximum: 600_000, default: 0 }),
  jitterMs: Type.Integer({ minimum: 0, maximum: 600_000, default: 0 }),
  errorRate: Type.Number({ minimum: 0, maximum: 1, default: 0 }),
  mode: Type.String({ enum: ['normal', 'hang', 'reset'], default: 'normal' }),
}, { additionalProperties: false })
export type SandboxFaults = Static<typeof SandboxFaults>

export const QueueName = Type.String({ pattern: '^[a-z0-9][a-z0-9_-]{0,62}$' })

/** PATCH /admin/queues/:name: each field optional, at least one, nothing else. */
export const QueuePatchBody = Type.Object({
  // null = unlimited; 0 admits no new claims (a stop that shows as a limit).
  maxWorkers: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 10_000 }), Type.Null()])),
  paused: Type.Optional(Type.Boolean()),
  active: Type.Optional(Type.Boolean()),
  zombieTimeoutSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
}, { additionalProperties: false, minProperties: 1 })
export type QueuePatchBody = Static<typeof QueuePatchBody>

export const RequeueBody = Type.Object({
  /** Dead job ids to requeue; all of the queue's dead jobs when absent. */
  ids: Type.Optional(Type.Array(Type.String({ pattern: '^[1-9][0-9]{0,18}$' }), { minItems: 1, maxItems: 1_000, uniqueItems: true })),
}, { additionalProperties: false })
export type RequeueBody = Static<typeof RequeueBody>
