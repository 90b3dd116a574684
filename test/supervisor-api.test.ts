// The supervisor as an object, in-process (services/supervisor/supervisor.ts):
// a start that cannot go on rejects with what it said, leaves nothing running
// and exits nothing; stop() then resolves without draining twice. Only the
// refusals that come before any compiling, database or child: the whole fleet
// is test/serial/supervisor.test.ts's.
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { loadConfig } from '../shared/config.ts'
import { SUPERVISOR_ENV } from '../services/supervisor/config.ts'
import { createSupervisor, StartFailed } from '../services/supervisor/supervisor.ts'
import { fleetPorts } from './helpers/procs.ts'

const { ports, env: portEnv } = await fleetPorts()
// The lanes' ports come from the environment, as the children's do.
Object.assign(process.env, portEnv)
const dataDir = path.join(os.tmpdir(), `wt-sup-api-${process.pid}`)
const env = { ...portEnv, DATA_DIR: dataDir, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', FLEET_PREBUILT: 'true', FLEET_DIST: 'no-such-dist' }

function supervisorWith (extra: Record<string, string>) {
  const lines: string[] = []
  const say = (l: string): void => { lines.push(l) }
  const cfg = loadConfig(SUPERVISOR_ENV, { ...env, ...extra })
  return { lines, supervisor: createSupervisor(cfg, { say, sayError: say }) }
}

const canListen = (port: number): Promise<boolean> => new Promise(resolve => {
  const s = net.createServer().once('error', () => resolve(false))
  s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
})

t.test('a port held: start() rejects with the message it said, stops, and starts nothing', async t => {
  const holder = net.createServer()
  await new Promise<void>(resolve => holder.listen(ports.DECK_PORT, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => holder.close(() => resolve())))
  const { lines, supervisor } = supervisorWith({})

  const err = await supervisor.start().then(() => undefined, (e: unknown) => e)
  t.ok(err instanceof StartFailed, 'a StartFailed')
  t.match(err, { exitCode: 1, message: new RegExp(`^the fleet cannot start: its ports are taken\\n  port ${ports.DECK_PORT} \\(deck\\) is in use by pid ${process.pid}`) }, 'exit code 1, naming the port and its holder')
  t.same(lines, [(err as Error).message, 'draining the gateway, then the lanes, then PostgreSQL', 'stopped'], 'said, then stopped what there was')
  t.ok(supervisor.stopping, 'stopping')
  await supervisor.stop()
  t.equal(lines.length, 3, 'stop() again resolves without a second drain')
  const others = Object.entries(ports).filter(([k]) => k !== 'DECK_PORT').map(([, p]) => p)
  t.same(await Promise.all(others.map(canListen)), others.map(() => true), 'every other port of the fleet is still free: no child started')
  t.notOk(fs.existsSync(dataDir), 'its data directory untouched')
})

t.test('two gateways without REDIS_URL: one line, no drain, nothing touched', async t => {
  const { lines, supervisor } = supervisorWith({ GATEWAY_REPLICAS: '2', REDIS_URL: '' })
  await t.rejects(supervisor.start(), { name: 'StartFailed', exitCode: 1, message: /^ERR_CONFIG_INVALID: GATEWAY_REPLICAS=2 needs REDIS_URL/ })
  t.equal(lines.length, 1, `one line: ${lines.join('\n')}`)
  t.notOk(supervisor.stopping, 'nothing to stop')
  await supervisor.stop()
  t.same(lines.slice(1), ['draining the gateway, then the lanes, then PostgreSQL', 'stopped'], 'stop() with nothing started resolves')
  t.notOk(fs.existsSync(dataDir), 'its data directory untouched')
})
