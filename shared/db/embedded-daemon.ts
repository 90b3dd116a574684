// Runs the embedded PostgreSQL server in its own process group, so a Ctrl-C in
// the terminal reaches only the supervisor, which stops the lanes first and this
// server last. It also stops the server when its parent dies (IPC disconnect),
// so a killed supervisor leaves no PostgreSQL behind. A server that cannot start
// is one line to the parent (or to stderr, run alone) and the error's exit code.
import { isEmbeddedStartError, startEmbedded } from './embedded.ts'

const opts = JSON.parse(process.env.WT_EMBEDDED_OPTS ?? '{}') as { dataDir: string, port: number, password: string }
let stop: () => Promise<void> = async () => {}
const quit = (): void => { stop().finally(() => process.exit(0)) }
process.on('SIGTERM', quit)
process.on('SIGINT', () => {})
process.on('disconnect', quit)
try {
  const server = await startEmbedded({ ...opts, log: line => { if (/FATAL|PANIC|ERROR/.test(line)) process.stderr.write(line) } })
  stop = () => server.stop()
  process.send?.({ ready: true })
} catch (err) {
  const exitCode = isEmbeddedStartError(err) ? err.exitCode : 1
  const error = isEmbeddedStartError(err) ? err.message : `embedded PostgreSQL did not start: ${String(err)}`
  if (process.send) process.send({ error, exitCode }, () => process.exit(exitCode))
  else { process.stderr.write(error + '\n'); process.exit(exitCode) }
}
