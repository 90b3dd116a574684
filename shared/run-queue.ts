// How long this process's main thread (the one that runs JavaScript) has waited
// for a CPU: run_delay in /proc/self/schedstat, in milliseconds. A lane that runs
// at a lower CPU priority (the supervisor's nice for P2) is preempted on a busy
// core, and a wall-clock timing of a few microseconds of code then includes the
// scheduler's wait; this lets a timing say how much of it was that wait.
// undefined where the file does not exist (not Linux, or no scheduler stats).
import fs from 'node:fs'

let fd: number | null | undefined
const buf = Buffer.alloc(80)

export function runQueueWaitMs (): number | undefined {
  if (fd === undefined) {
    try { fd = fs.openSync('/proc/self/schedstat', 'r') } catch { fd = null }
  }
  if (fd === null) return undefined
  try {
    // One pread at offset 0 regenerates the line: "<on cpu ns> <run_delay ns> <slices>".
    const n = fs.readSync(fd, buf, 0, buf.length, 0)
    const delay = Number(buf.toString('latin1', 0, n).split(' ')[1])
    return Number.isFinite(delay) ? delay / 1e6 : undefined
  } catch {
    return undefined
  }
}
