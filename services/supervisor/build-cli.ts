// The first half of `npm start` (start.mjs): the supervisor's settings checked and
// the fleet compiled with the supervisor in it, in a short-lived process under
// tsx; the compiled supervisor's path goes back to start.mjs over IPC.
import fs from 'node:fs'
import path from 'node:path'
import { loadConfig } from '../../shared/config.ts'
import { buildFleet, fleetEntry } from './build.ts'
import { SUPERVISOR_ENV } from './config.ts'

const say = (m: string): void => { process.stdout.write(`[supervisor] ${m}\n`) }
// start.mjs gone (stopped while this compiled): nothing is left to hand the result to.
const parentGone = (): never => process.exit(1)
process.on('disconnect', parentGone)
try {
  const cfg = loadConfig(SUPERVISOR_ENV, process.env)
  let entry = fleetEntry(cfg.FLEET_DIST)
  if (!cfg.FLEET_PREBUILT) {
    say(`compiling the fleet to ${cfg.FLEET_DIST}/`)
    entry = await buildFleet(cfg.FLEET_DIST, { withSupervisor: true })
  }
  const supervisor = path.join(path.dirname(entry), 'supervisor/main.js')
  if (!fs.existsSync(supervisor)) throw new Error(`FLEET_PREBUILT: ${cfg.FLEET_DIST}/ has no compiled supervisor (${supervisor}); build it with sh deploy/build-dist.sh ${cfg.FLEET_DIST} --with-supervisor`)
  process.off('disconnect', parentGone)
  process.send!({ supervisor }, () => process.disconnect())
} catch (err) {
  say((err as Error).message)
  process.exit(1)
}
