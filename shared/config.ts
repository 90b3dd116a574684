// Boot-time configuration: one schema per process, validated once, then frozen.
// A bad value stops the process with ERR_CONFIG_INVALID listing every problem,
// rather than running with a silently wrong limit.
import { Value } from 'typebox/value'
import type { TSchema, Static } from 'typebox'
import { AppError } from './errors.ts'

export function loadConfig<S extends TSchema> (schema: S, env: Record<string, string | undefined>): Readonly<Static<S>> {
  const raw: Record<string, unknown> = {}
  const props = (schema as unknown as { properties?: Record<string, unknown> }).properties ?? {}
  for (const key of Object.keys(props)) {
    const v = env[key]
    if (v !== undefined && v !== '') raw[key] = v
  }
  const value = Value.Default(schema, Value.Convert(schema, raw))
  const errors = [...Value.Errors(schema, value)]
  if (errors.length > 0) {
    const list = errors.map(e => `${e.instancePath.slice(1) || '(root)'} ${e.message}`)
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
