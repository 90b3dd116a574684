// What every benchmark and drill needs around its measurement: number flags
// checked once, a sleep, the client's POST, and the stamp printed with the figures (commit and
// machine), so a figure can always be traced to the code and host that made it.
import { execFileSync } from 'node:child_process'
import os from 'node:os'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import type { Pool } from 'undici'

export { setTimeout as sleep } from 'node:timers/promises'

/**
 * A duration (ms) in a Server-Timing header: the lane's `admit`, `inproc`,
 * `answer`, the gateway's `gateway`; null when absent.
 */
export function serverTiming (header: unknown, name: string): number | null {
  const m = new RegExp(`(?:^|, )${name};(?:[^,]*;)?dur=([\\d.]+)`).exec(String(header ?? ''))
  return m ? Number(m[1]) : null
}

/**
 * The command line's flags; an unknown flag or a missing value prints what is
 * wrong (and `usage`) and exits 2, with no stack trace.
 */
export function parseFlags<const T extends ParseArgsConfig> (config: T, usage = ''): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config)
  } catch (err) {
    console.error(`${(err as Error).message}${usage ? `\n${usage}` : ''}`)
    process.exit(2)
  }
}

/** A numeric flag from parseArgs' values, within [min, max]; exits 2 with a message otherwise. */
export function numberFlag<K extends string> (
  values: Partial<Record<K, string | boolean | undefined>>, key: K, min = 0, max = Number.MAX_SAFE_INTEGER
): number {
  const v = Number(values[key])
  if (!Number.isFinite(v) || v < min || v > max) { console.error(`--${key} must be a number from ${min} to ${max} (got ${String(values[key])})`); process.exit(2) }
  return v
}

/** The checkout's commit, marked -dirty when the working tree differs. */
export function gitCommit (cwd = process.cwd()): string {
  try { return execFileSync('git', ['describe', '--always', '--dirty', '--abbrev=7'], { cwd, encoding: 'utf8' }).trim() } catch { return 'unknown' }
}

export function machine (o: { kernel?: boolean } = {}): string {
  return `${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${o.kernel ? `Linux ${os.release()}, ` : ''}node ${process.version}`
}

/** A client's POST through the gateway: its API key, an Idempotency-Key, a JSON body. */
export function gatewayPost (pool: Pool, apiKey: string, path: string, idempotencyKey: string, body: unknown) {
  return pool.request({
    method: 'POST',
    path,
    headers: { authorization: `Bearer ${apiKey}`, 'idempotency-key': idempotencyKey, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
}
