// The supervisor tests judge "every child is gone" with running(pid)
// (test/helpers/procs.ts). It must not be vacuous: a live process is running, a
// process that exited but is not reaped yet (a zombie) is not, and neither is a
// pid that no longer exists.
import { spawn } from 'node:child_process'
import readline from 'node:readline'
import t from 'tap'
import { eventually } from './helpers/http.ts'
import { processState, running } from './helpers/procs.ts'

t.test('a live process is running; its unreaped exited child is not; a reaped one is not', async t => {
  // sh starts a short sleep in the background, prints its pid, then becomes a
  // long sleep, which never waits for children: the short one exits after the
  // exec (so sh cannot have reaped it) and stays a zombie of it.
  const parent = spawn('sh', ['-c', 'sleep 0.3 & echo $!; exec sleep 30'], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { if (parent.exitCode === null) parent.kill('SIGKILL') })
  const zombie = Number(await new Promise<string>(resolve => readline.createInterface({ input: parent.stdout! }).once('line', resolve)))
  t.ok(await eventually(async () => processState(zombie) === 'Z', 10_000, 20), `the child ${zombie} exited and is left unreaped (state ${processState(zombie)})`)
  t.equal(running(zombie), false, 'an exited, unreaped process is not running')
  t.equal(running(parent.pid!), true, 'the live parent is running')

  const exited = new Promise(resolve => parent.once('exit', resolve))
  parent.kill('SIGKILL')
  await exited
  t.equal(running(parent.pid!), false, 'the parent, killed and reaped, is not running')
  t.equal(running(zombie), false, 'its child, now PID 1\'s to reap, is still not running')
})
