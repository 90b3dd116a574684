// runQueueWaitMs() reads the main thread's run-queue wait from
// /proc/self/schedstat: it must grow when the thread is ready but another
// process holds its only CPU.
import { spawn, spawnSync } from 'node:child_process'
import os from 'node:os'
import t from 'tap'
import { runQueueWaitMs } from '../shared/run-queue.ts'
import { hasTaskset, pinSelf } from './load/local-fleet.ts'

const spin = (ms: number): void => { const end = performance.now() + ms; while (performance.now() < end) { /* busy */ } }

t.test('the run-queue wait grows while another process holds the CPU', { skip: !hasTaskset() && 'no taskset' }, async t => {
  const first = runQueueWaitMs()
  t.type(first, 'number', 'readable on Linux')
  t.ok(runQueueWaitMs()! >= first!, 'never goes back')

  // This process and a busy child share one CPU: for 300 ms of wall clock this
  // thread gets only part of it, and waits in the run queue for the rest.
  const cpu = String(Math.max(0, os.availableParallelism() - 1))
  const before = spawnSync('taskset', ['-cp', String(process.pid)], { encoding: 'utf8' }).stdout.trim().split(' ').at(-1)!
  t.equal(pinSelf(cpu), true, `pinned to cpu ${cpu} (was ${before})`)
  t.teardown(() => { pinSelf(before) })
  const hog = spawn('taskset', ['-c', cpu, process.execPath, '-e', 'for(;;){}'], { stdio: 'ignore' })
  t.teardown(() => { hog.kill('SIGKILL') })
  await new Promise(resolve => setTimeout(resolve, 100))
  const a = runQueueWaitMs()!
  spin(300)
  const waited = runQueueWaitMs()! - a
  t.ok(waited > 50, `waited ${waited.toFixed(1)} ms of 300 ms for the CPU the child holds`)
})
