// `npm start`: the whole fleet on one machine, run by the supervisor
// (supervisor.ts). This entry is the process around it: its settings, the
// signals (SIGINT/SIGTERM/SIGHUP) and errors of its own on which the fleet
// drains and stops, the npm parent's watch, the exit code, and the kill of
// whatever is still running when the process exits.
import { loadConfig } from '../../shared/config.ts'
import { idleTrimMs, startIdleTrim } from '../../shared/idle-trim.ts'
import { onShutdown, SUPERVISOR_KILL_AFTER_MS } from '../../shared/lifecycle.ts'
import { SUPERVISOR_ENV } from './config.ts'
import { createSupervisor, StartFailed } from './supervisor.ts'

const cfg = loadConfig(SUPERVISOR_ENV, process.env)
// Checked here before any child: a bad value would stop each of them at its start, over and over.
startIdleTrim({ idleMs: idleTrimMs(process.env) })
// Decided once, here: children inherit this terminal, so each would see a TTY
// of its own. Pretty lines for a person at a terminal, JSON lines otherwise
// (a pipe, a file, a test); LOG_FORMAT set by hand wins. Children inherit it
// through the environment (child.ts spawns with process.env).
process.env.LOG_FORMAT = cfg.LOG_FORMAT ?? (process.stdout.isTTY ? 'pretty' : 'json')

const say = (m: string): void => { process.stdout.write(`[supervisor] ${m}\n`) }
const supervisor = createSupervisor(cfg, { say })
process.once('exit', () => supervisor.killNow())
const shutdown = onShutdown({ info: (_o, m) => say(m), error: (o, m) => say(`${m}: ${String((o as { err?: unknown }).err)}`) }, () => supervisor.stop(), 2 * SUPERVISOR_KILL_AFTER_MS + 10_000)
// Run by npm, the supervisor's parent is npm's `sh -c`, which passes no signal on:
// a SIGTERM to npm alone (a process manager stopping `npm start`) killed the shell
// and left the whole fleet running. So once that parent is gone, the fleet stops
// as it does on SIGTERM (unless it is already stopping: a second signal would cut
// the drain short).
if (process.env.npm_lifecycle_event) {
  const parent = process.ppid
  const watch = setInterval(() => {
    if (process.ppid === parent) return
    clearInterval(watch)
    if (!supervisor.stopping) shutdown.close()
  }, 500)
  watch.unref()
}

try {
  await supervisor.start()
} catch (err) {
  // Said already, in one line, and what it had started is stopped.
  if (err instanceof StartFailed) process.exit(err.exitCode)
  throw err
}
