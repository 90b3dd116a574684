// PostgreSQL's backends at their lane's CPU priority, when PostgreSQL runs on
// this host. Every backend is a child of the postmaster, one session, so under
// scheduler autogroups the database is one group against the Node processes,
// and a backend's own nice ranks it within that group: tax_ds's queries then
// yield the database's share of the CPU to card_auth_ds's. The supervisor sweeps
// pg_stat_activity (pools keep their connections open, so a new backend is
// rare) and renices each backend of a known role once.
import fs from 'node:fs'
import os from 'node:os'
import type pg from 'pg'

export interface BackendPriorities {
  /** One sweep now: how many backends got a new priority. */
  sweep (): Promise<number>
  stop (): void
}

/**
 * `client`: a connection that can read every role's rows of pg_stat_activity.
 * `niceOf`: role -> nice. A pid is reniced only when it is a postgres process
 * here (its /proc/<pid>/comm), so a server elsewhere is never mistaken for one.
 */
export function backendPriorities (client: pg.Client, niceOf: Record<string, number>, o: { intervalMs: number, log: (m: string) => void }): BackendPriorities {
  const done = new Map<number, number>()
  let failed = false
  let timer: NodeJS.Timeout | undefined
  const sweep = async (): Promise<number> => {
    if (failed) return 0
    const { rows } = await client.query<{ pid: number, role: string }>('select pid, usename as role from pg_stat_activity where usename = any($1)', [Object.keys(niceOf)])
    const seen = new Set<number>()
    let changed = 0
    for (const { pid, role } of rows) {
      seen.add(pid)
      const nice = niceOf[role]!
      if (done.get(pid) === nice) continue
      let comm: string
      try { comm = fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() } catch { continue } // gone, or not on this host
      if (comm !== 'postgres') continue
      try {
        os.setPriority(pid, nice)
        done.set(pid, nice)
        changed++
      } catch (err) {
        failed = true
        o.log(`could not set the CPU priority of PostgreSQL backend ${pid} (${role}): ${(err as Error).message}; database backends keep one priority`)
        return changed
      }
    }
    for (const pid of done.keys()) if (!seen.has(pid)) done.delete(pid)
    return changed
  }
  const loop = (): void => {
    timer = setTimeout(() => { sweep().catch(err => o.log(`backend priorities: ${(err as Error).message}`)).finally(() => { if (timer) loop() }) }, o.intervalMs)
    timer.unref()
  }
  loop()
  return {
    sweep,
    stop: () => { const t = timer; timer = undefined; clearTimeout(t) },
  }
}
