// Admission around a lane route: take a permit (or be rejected at once), run the
// work under a hard deadline with an AbortSignal, and give the permit back
// exactly once, whatever ends the work.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type pg from 'pg'
import { BulkheadRejected, type Bulkhead } from '../bulkhead.ts'
import { AppError, isAppError } from '../errors.ts'
import type { LaneMetrics, LaneRejectReason } from '../metrics.ts'
import { runQueueWaitMs } from '../run-queue.ts'
import { executionDb, type Execution } from './execution.ts'
import type { RecoveryWatch } from './recovery.ts'

export interface LaneResult {
  status: number
  body: unknown
  headers?: Record<string, string>
}

export type LaneHandler = (req: FastifyRequest, exec: Execution) => Promise<LaneResult>
/** Decides what a rejected arrival gets: 429, a compensated answer, a 202, ... */
export type RejectHandler = (reason: LaneRejectReason, req: FastifyRequest) => Promise<LaneResult> | LaneResult

export interface AdmissionDeps {
  bulkhead: Bulkhead
  metrics: LaneMetrics
  /** The lane's pool at the time of the call (it can be replaced). */
  pool: () => pg.Pool
  recovery: RecoveryWatch
  deadlineMs: number
}

export function admitted (deps: AdmissionDeps, handler: LaneHandler, onReject: RejectHandler) {
  return async function admittedHandler (req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    // With every permit taken this arrival is about to be shed or queued: note the
    // main thread's run-queue wait too, so the decision's timing can say how much of
    // it was spent waiting for a CPU rather than deciding (one pread, overload only).
    const runq0 = deps.bulkhead.active >= deps.bulkhead.permits ? runQueueWaitMs() : undefined
    const entered = performance.now()
    const gone = new AbortController()
    // ServerResponse 'close' fires on completion too; only a close before the end is a disconnect.
    const onClose = (): void => { if (!reply.raw.writableFinished) gone.abort(new Error('client disconnected')) }
    reply.raw.on('close', onClose)
    let permit
    // acquire() decides at once when the queue has no room: time that decision itself.
    const pending = deps.bulkhead.acquire(gone.signal)
    const decidedAt = performance.now()
    const runq1 = runq0 === undefined ? undefined : runQueueWaitMs()
    try {
      permit = await pending
    } catch (err) {
      reply.raw.off('close', onClose)
      if (!(err instanceof BulkheadRejected)) throw err
      if (err.reason === 'aborted') return reply.hijack()
      deps.metrics.rejection(err.reason)
      // How long admission took to decide (INV-BH-02 asks < 5 ms), and how long the
      // request had been in the process by then (parsing, validation, event-loop wait).
      // runq: of the admit time, how long the process was off the CPU (ready, not
      // running); only for an immediate decision, whose two readings bracket it.
      const decided = err.reason === 'queue_timeout' ? performance.now() : decidedAt
      const runq = err.reason !== 'queue_timeout' && runq0 !== undefined && runq1 !== undefined ? `, runq;desc="waiting for a CPU during admit";dur=${Math.max(0, runq1 - runq0).toFixed(3)}` : ''
      reply.header('server-timing', `admit;desc="${err.reason}";dur=${(decided - entered).toFixed(3)}${runq}, inproc;dur=${reply.elapsedTime.toFixed(3)}`)
      return send(reply, await onReject(err.reason, req))
    }
    deps.metrics.permitWait(permit.waitedMs / 1000)

    const ac = new AbortController()
    const abort = (reason: unknown): void => { if (!ac.signal.aborted) ac.abort(reason) }
    gone.signal.addEventListener('abort', () => abort(gone.signal.reason), { once: true })
    const deadline = setTimeout(() => abort(new AppError('ERR_DEADLINE_EXCEEDED', { detail: `execution exceeded ${deps.deadlineMs} ms` })), deps.deadlineMs)
    const stopped = new Promise<never>((_resolve, reject) => ac.signal.addEventListener('abort', () => reject(ac.signal.reason), { once: true }))
    stopped.catch(() => {})
    try {
      const exec: Execution = { signal: ac.signal, db: executionDb(deps.pool, ac.signal, deps.recovery) }
      const result = await Promise.race([handler(req, exec), stopped])
      return send(reply, result)
    } catch (err) {
      if (ac.signal.aborted && isAppError(ac.signal.reason) && ac.signal.reason.code === 'ERR_DEADLINE_EXCEEDED') {
        deps.metrics.rejection('deadline')
        throw ac.signal.reason
      }
      if (gone.signal.aborted) return reply.hijack()
      throw err
    } finally {
      clearTimeout(deadline)
      // The permit comes back now even if the work ignores the signal and runs on.
      permit.release()
      abort(new Error('execution finished'))
      reply.raw.off('close', onClose)
    }
  }
}

function send (reply: FastifyReply, r: LaneResult): FastifyReply {
  if (r.headers) for (const [k, v] of Object.entries(r.headers)) reply.header(k, v)
  return reply.code(r.status).send(r.body)
}
