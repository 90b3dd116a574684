// The fleet's processes run as compiled JavaScript, bundled (deploy/bundle.mjs),
// the same files the container image runs (deploy/build-dist.sh), never under a
// TypeScript loader: a loader adds a hooks thread and its memory to every
// process and slows its start-up, and a process that must exit when its
// supervisor is gone must not depend on that thread to do it.
// Built into a fresh directory and swapped in, so a build never leaves a half
// tree where a running fleet loads modules.
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { findUp } from '../../shared/tree.ts'

/** The repo: the nearest folder above this file with a package.json (this file also runs compiled, from dist/). */
export const ROOT = findUp(import.meta.dirname, 'package.json')

/**
 * Bundle the fleet into `outDir` (absolute, or relative to the repo); returns the
 * entry, services/main.js. `withSupervisor` bundles the supervisor too (npm start
 * runs it compiled; the image has none).
 */
export async function buildFleet (outDir: string, opts: { withSupervisor?: boolean } = {}): Promise<string> {
  const out = path.resolve(ROOT, outDir)
  const tmp = `${out}.tmp-${process.pid}`
  try {
    await promisify(execFile)('sh', [path.join(ROOT, 'deploy/build-dist.sh'), tmp, ...(opts.withSupervisor ? ['--with-supervisor'] : [])], { cwd: ROOT })
  } catch (err) {
    fs.rmSync(tmp, { recursive: true, force: true })
    const e = err as { stdout?: string, stderr?: string, message: string }
    throw new Error(`could not compile the fleet: ${(e.stdout ?? '') + (e.stderr ?? '') || e.message}`)
  }
  fs.rmSync(out, { recursive: true, force: true })
  fs.renameSync(tmp, out)
  return fleetEntry(out)
}

export function fleetEntry (outDir: string): string {
  return path.join(path.resolve(ROOT, outDir), 'services/main.js')
}
