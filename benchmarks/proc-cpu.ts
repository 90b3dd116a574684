// CPU time of processes from /proc/<pid>/stat (utime + stime, in clock ticks of
// 10 ms), and of a PostgreSQL server's backends grouped by the role they
// connect as, so a benchmark can divide each by the requests it served.
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import type pg from 'pg'
import { descendants } from './local-fleet.ts'

const TICK_US = 1_000_000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim() || 100)

/** CPU used so far by a process (µs): user + system; undefined when it is gone. */
export function cpuUs (pid: number): number | undefined {
  const c = cpuSplitUs(pid)
  return c && c.user + c.system
}

/** CPU used so far by a process (µs), user and system apart. */
export function cpuSplitUs (pid: number): { user: number, system: number } | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return { user: Number(f[11]) * TICK_US, system: Number(f[12]) * TICK_US }
  } catch { return undefined }
}

function cmdline (pid: number): string {
  try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ') } catch { return '' }
}

/**
 * What to call each process below `root`: a fleet child by the process it runs
 * (`node dist/services/main.js <name>`), a PostgreSQL backend by its role
 * (`pg:<role>`), PostgreSQL's own processes `pg:server`, anything else by its command.
 */
export async function fleetProcesses (
  root: number, db: pg.Client, names: Record<number, string> = {}
): Promise<Map<number, string>> {
  const { rows } = await db.query<{ pid: number, usename: string | null, backend_type: string }>('select pid, usename, backend_type from pg_stat_activity')
  const role = new Map(rows.map(r => [r.pid, r.usename ? `pg:${r.usename.replace(/^t[0-9a-f]{8}_/, '')}` : 'pg:server']))
  const out = new Map<number, string>()
  for (const pid of [root, ...descendants(root)]) {
    const cmd = cmdline(pid)
    const m = /services\/main\.js (\S+)/.exec(cmd)
    const label = names[pid] ?? (role.get(pid) ??
      (m ? m[1]! : /postgres/.test(cmd) ? 'pg:server' : /supervisor/.test(cmd) ? 'supervisor' : cmd.split(' ').slice(0, 2).join(' ')))
    out.set(pid, label)
  }
  // A child's worker is named after its queues.
  return out
}

/** CPU µs of each process right now (a process that is gone is left out); with `system`, only the kernel's part. */
export function cpuByPid (procs: Map<number, string>, part: 'all' | 'system' = 'all'): Map<number, number> {
  const out = new Map<number, number>()
  for (const pid of procs.keys()) {
    const c = cpuSplitUs(pid)
    if (c !== undefined) out.set(pid, part === 'system' ? c.system : c.user + c.system)
  }
  return out
}

/**
 * CPU µs each label used between two readings of cpuByPid: summed over the
 * processes seen in both, so a backend that exits in between (its time then
 * lost, a few ms at most) cannot make a label's figure negative.
 */
export function cpuDeltaByLabel (
  procs: Map<number, string>, before: Map<number, number>, after: Map<number, number>
): Map<string, number> {
  const out = new Map<string, number>()
  for (const [pid, label] of procs) {
    const b = before.get(pid)
    const e = after.get(pid)
    out.set(label, (out.get(label) ?? 0) + (b !== undefined && e !== undefined ? e - b : 0))
  }
  return out
}
