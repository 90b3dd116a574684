// CPU priorities for the database's work too (docs/operations.md, "CPU
// priorities"). The embedded server's backends are the postmaster's children,
// all at nice 0, so a tax quote's SQL competed with card-auth's at P0 on a shared
// core. Every `everyMs` the supervisor reads which backend serves
// which role (pg_stat_activity) and sets each backend of a lower-priority role to
// that role's nice: on the backend's process alone, with setpriority. The
// backends share the postmaster's session, so its autogroup (whose nice would
// move all of them) is left as it is; inside that group, nice ranks them. Only
// for a server this supervisor started: an external server's processes are not
// its to touch, and may not be on this host at all.
import os from 'node:os'
import { createClient } from '../../shared/db/pool.ts'

export interface BackendPriorities { stop (): Promise<void> }

export interface BackendPrioritiesOptions {
  databaseUrl: string
  niceByRole: Record<string, number>
  everyMs: number
  log (m: string): void
}

export function startBackendPriorities (o: BackendPrioritiesOptions): BackendPriorities {
  const roles = Object.keys(o.niceByRole).filter(r => o.niceByRole[r]! > 0)
  const reniced = new Map<number, number>()
  let warned = false
  const warnOnce = (m: string): void => { if (!warned) { warned = true; o.log(m) } }
  const client = createClient(o.databaseUrl, 'watertight-supervisor')
  let stopped = false
  client.on('error', err => { if (!stopped) warnOnce(`backend CPU priorities: ${err.message}`) })
  let connected: Promise<void> | undefined

  const sweep = async (): Promise<void> => {
    connected ??= client.connect().then(() => {})
    await connected
    const { rows } = await client.query<{ pid: number, usename: string }>('select pid, usename from pg_stat_activity where usename = any($1)', [roles])
    const live = new Set<number>()
    for (const { pid, usename } of rows) {
      live.add(pid)
      const nice = o.niceByRole[usename]!
      if (reniced.get(pid) === nice) continue
      try {
        os.setPriority(pid, nice)
        reniced.set(pid, nice)
      } catch (err) {
        // Gone meanwhile (a pool closed it) is not an error; not permitted is said once.
        if ((err as { code?: string }).code !== 'ESRCH') warnOnce(`could not set the CPU priority of ${usename}'s backends: ${(err as Error).message}`)
      }
    }
    for (const pid of reniced.keys()) if (!live.has(pid)) reniced.delete(pid)
  }

  let running: Promise<void> = Promise.resolve()
  const tick = (): void => {
    running = sweep().catch(err => { if (!stopped) warnOnce(`backend CPU priorities: ${(err as Error).message}`) })
  }
  tick()
  const timer = setInterval(tick, o.everyMs)
  timer.unref()
  return {
    async stop () {
      stopped = true
      clearInterval(timer)
      await running
      await client.end().catch(() => {})
    },
  }
}
