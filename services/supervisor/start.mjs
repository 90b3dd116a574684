// `npm start`. The supervisor runs compiled, as its children do: under a
// TypeScript loader it would hold more memory for as long as the fleet ran (the
// loader's hooks thread and its heap). This file is plain JavaScript, so it
// needs no loader: it has build-cli.ts compile the fleet with the supervisor in
// it (a short-lived process under tsx), then runs the compiled supervisor in this
// same process, which npm's signals reach exactly as they reached the source one.
import { spawn } from 'node:child_process'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const build = spawn(process.execPath, ['--import', 'tsx', path.join(import.meta.dirname, 'build-cli.ts')], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
let supervisor
build.on('message', m => { supervisor = m.supervisor })
const code = await new Promise(resolve => build.once('exit', (c, signal) => resolve(signal ? 1 : c)))
if (code !== 0 || typeof supervisor !== 'string') process.exit(code || 1)
await import(pathToFileURL(supervisor).href)
