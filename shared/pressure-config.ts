// Under-pressure limits of a process, declared once: the lanes read them with
// their lane prefix (FRAUD_PRESSURE_MAX_HEAP_BYTES), the other processes with
// theirs (WORKER_, DECK_, TAX_SANDBOX_). 0 turns a limit off.
import { Type } from 'typebox'
import { loadConfig } from './config.ts'

export interface PressureLimits {
  readonly maxEventLoopDelayMs: number
  readonly maxEventLoopUtilization: number
  readonly maxHeapUsedBytes: number
  readonly maxRssBytes: number
}

/** The env keys (after the process's prefix) and their defaults. */
export const PRESSURE_SCHEMA_PROPERTIES = {
  PRESSURE_MAX_EVENT_LOOP_DELAY_MS: Type.Integer({ default: 1_000, minimum: 0, maximum: 600_000 }),
  PRESSURE_MAX_EVENT_LOOP_UTILIZATION: Type.Number({ default: 0.98, minimum: 0, maximum: 1 }),
  PRESSURE_MAX_HEAP_BYTES: Type.Integer({ default: 1_536 * 1024 * 1024, minimum: 0, maximum: 2 ** 48 }),
  PRESSURE_MAX_RSS_BYTES: Type.Integer({ default: 2_048 * 1024 * 1024, minimum: 0, maximum: 2 ** 48 }),
}

interface PressureEnv {
  PRESSURE_MAX_EVENT_LOOP_DELAY_MS: number
  PRESSURE_MAX_EVENT_LOOP_UTILIZATION: number
  PRESSURE_MAX_HEAP_BYTES: number
  PRESSURE_MAX_RSS_BYTES: number
}

/** Limits from a validated config that holds the PRESSURE_* keys. */
export function toPressureLimits (c: PressureEnv): PressureLimits {
  return Object.freeze({
    maxEventLoopDelayMs: c.PRESSURE_MAX_EVENT_LOOP_DELAY_MS,
    maxEventLoopUtilization: c.PRESSURE_MAX_EVENT_LOOP_UTILIZATION,
    maxHeapUsedBytes: c.PRESSURE_MAX_HEAP_BYTES,
    maxRssBytes: c.PRESSURE_MAX_RSS_BYTES,
  })
}

/** `<prefix>PRESSURE_*` from env, validated (ERR_CONFIG_INVALID names the variables as spelled). */
export function pressureLimits (prefix: string, env: Record<string, string | undefined> = process.env): PressureLimits {
  const props = Object.entries(PRESSURE_SCHEMA_PROPERTIES).map(([k, v]) => [prefix + k, v])
  const c = loadConfig(Type.Object(Object.fromEntries(props)), env) as Record<string, number>
  const unprefixed = Object.fromEntries(Object.keys(PRESSURE_SCHEMA_PROPERTIES).map(k => [k, c[prefix + k]!]))
  return toPressureLimits(unprefixed as unknown as PressureEnv)
}

/** The defaults, for apps built in-process without env (tests, tax:certify's sandbox). */
export const DEFAULT_PRESSURE_LIMITS: PressureLimits = pressureLimits('', {})
