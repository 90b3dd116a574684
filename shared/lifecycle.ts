// One graceful shutdown for every process of the fleet (close-with-grace): on
// SIGTERM/SIGINT/SIGHUP, an uncaught error, or the supervisor going away (its
// IPC channel closes), `close` drains the process, and if draining takes longer
// than the grace period the process exits anyway. The supervisor sends SIGKILL
// to a child that is still there SUPERVISOR_KILL_AFTER_MS after its SIGTERM, so
// a child's own grace period always ends first.
import { stopTracing } from './tracing.ts'
import closeWithGrace from 'close-with-grace'

/** How long a process may take to drain before it exits regardless. */
export const GRACE_MS = 10_000
/** When the supervisor escalates a stop to SIGKILL. */
export const SUPERVISOR_KILL_AFTER_MS = GRACE_MS + 2_000

export interface ShutdownLog { info (o: object, m: string): void, error (o: object, m: string): void }

// The supervisor can die at any moment, also while this process is still
// loading or warming up, before onShutdown is installed: a 'disconnect' nobody
// listened for is lost. watchParent() runs first thing in every process (the
// entry, services/main.ts); until onShutdown takes over, a gone parent means
// there is nothing to drain yet: exit now.
let parentGone = false
let watching = false
let closeNow: (() => void) | undefined

export function watchParent (): void {
  if (!process.send || watching) return // not started by a supervisor, or already watching
  watching = true
  const gone = (): void => {
    parentGone = true
    if (closeNow) closeNow()
    else process.exit(1)
  }
  if (!process.connected) return gone()
  process.once('disconnect', gone)
}

export function onShutdown (log: ShutdownLog, close: () => Promise<unknown>, graceMs = GRACE_MS): { close (): void } {
  const h = closeWithGrace({
    delay: graceMs,
    logger: { error: (m: unknown) => log.error({ err: m }, 'shutdown') },
    onTimeout: delay => log.error({ graceMs: delay }, 'drain took longer than the grace period; exiting'),
  }, async ({ signal, err, manual }) => {
    if (err) log.error({ err }, 'uncaught error; draining and exiting')
    else log.info({ reason: signal ?? (manual ? 'supervisor gone' : 'event loop empty') }, 'draining')
    await close()
    // The spans still queued go out (within the exporter's timeout and the grace period).
    await stopTracing()
  })
  // Started by the supervisor (an IPC channel): when it is gone, so are we.
  closeNow = h.close
  if (parentGone) h.close()
  else watchParent()
  return h
}
