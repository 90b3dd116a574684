// Boot-time configuration: one schema per process, validated once, then frozen.
// A bad value stops the process with ERR_CONFIG_INVALID listing every problem,
// rather than running with a silently wrong limit. A number is read only as
// plain decimal digits: typebox's conversion would take '1.5' for an integer as
// 1, '0x10' as 16 and '1e1' as 10, so an environment value is checked as written
// before it is converted.
import { Value } from 'typebox/value'
import type { TSchema, Static } from 'typebox'
import { AppError } from './errors.ts'

/** How a setting of each JSON-schema type must be written in the environment. */
const WRITTEN: Record<string, { pattern: RegExp, says: string } | undefined> = {
  integer: { pattern: /^-?\d+$/, says: 'an integer in decimal digits' },
  number: { pattern: /^-?\d+(\.\d+)?$/, says: 'a decimal number such as 0.5' },
  boolean: { pattern: /^(true|false|1|0)$/, says: 'true, false, 1 or 0' },
}

export function loadConfig<S extends TSchema> (
  schema: S, env: Record<string, string | undefined>
): Readonly<Static<S>> {
  const raw: Record<string, unknown> = {}
  const written = new Map<string, string>()
  const props = (schema as unknown as { properties?: Record<string, { type?: unknown }> }).properties ?? {}
  for (const [key, prop] of Object.entries(props)) {
    const v = env[key]
    if (v === undefined || v === '') continue
    const form = typeof prop.type === 'string' ? WRITTEN[prop.type] : undefined
    if (form && !form.pattern.test(v)) written.set(`/${key}`, `${key} must be ${form.says}, not ${JSON.stringify(v)}`)
    raw[key] = v
  }
  const value = Value.Default(schema, Value.Convert(schema, raw))
  const errors = [...Value.Errors(schema, value)].filter(e => !written.has(e.instancePath))
  if (errors.length > 0 || written.size > 0) {
    const list = [...written.values(), ...errors.map(e => `${e.instancePath.slice(1) || '(root)'} ${e.message}`)]
    throw new AppError('ERR_CONFIG_INVALID', { detail: `invalid configuration: ${list.join('; ')}`, extensions: { errors: list } })
  }
  return deepFreeze(value as Static<S>)
}

export function deepFreeze<T> (obj: T): Readonly<T> {
  if (obj && typeof obj === 'object' && !Object.isFrozen(obj)) {
    Object.freeze(obj)
    for (const v of Object.values(obj)) deepFreeze(v)
  }
  return obj
}
