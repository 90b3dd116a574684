// Admission around a lane route: take a permit (or be rejected at once), run the
// work under a hard deadline with a Canceller, and give the permit back
// exactly once, whatever ends the work.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type pg from 'pg'
import { BulkheadRejected, type Bulkhead, type FairShare, type Permit } from '../bulkhead.ts'
import { AppError, isAppError } from '../errors.ts'
import type { LaneMetrics, LaneRejectReason } from '../metrics.ts'
import { executionDb, type Execution } from './execution.ts'
import { Canceller } from '../cancellation.ts'
import type { RecoveryWatch } from './recovery.ts'
import { failed, inRequestSpan, openSpan, traceOf, underSpan, type Span } from '../tracing.ts'

export interface LaneResult {
  status: number
  body: unknown
  headers?: Record<string, string>
  /** A rejected arrival answered in a degraded way rather than refused (its admission span says which). */
  outcome?: 'compensated' | 'overflowed'
}

export type LaneHandler = (req: FastifyRequest, exec: Execution) => Promise<LaneResult>
/**
 * Decides what a rejected arrival gets: 429, a compensated answer, a 202, ...
 * `fair`: where its tenant stood, when other tenants were in flight.
 */
export type RejectHandler =
  (reason: LaneRejectReason, req: FastifyRequest, fair?: FairShare) => Promise<LaneResult> | LaneResult

export interface AdmissionDeps {
  lane: string
  bulkhead: Bulkhead
  metrics: LaneMetrics
  /** The lane's pool at the time of the call (it can be replaced). */
  pool: () => pg.Pool
  recovery: RecoveryWatch
  deadlineMs: number
  /** The request's tenant for fair admission ('' for none). */
  tenant: (req: FastifyRequest) => string
}

const FINISHED = new Error('execution finished')
const DISCONNECTED = new Error('client disconnected')

/**
 * A lane route under the bulkhead: permit (or an answer for the rejected
 * arrival), execution under the deadline, permit back. One Canceller per
 * request carries every reason the work must stop: the client gone, the
 * deadline, the end of the execution (an AbortSignal only if the handler asks
 * for one).
 */
export function admitted (deps: AdmissionDeps, handler: LaneHandler, onReject: RejectHandler) {
  return async function admittedHandler (req: FastifyRequest, reply: FastifyReply): Promise<unknown> {
    const entered = performance.now()
    const ac = new Canceller()
    // ServerResponse 'close' fires on completion too; only a close before the end is a disconnect.
    const onClose = (): void => { if (!reply.raw.writableFinished && !ac.aborted) ac.abort(DISCONNECTED) }
    reply.raw.on('close', onClose)
    // Traced: the decision, then the execution, each its own span (nothing when tracing is off).
    const admission = openSpan('bulkhead.admission', { attributes: { 'watertight.lane': deps.lane } }, traceOf(req))
    let permit: Permit
    try {
      // acquire() decides at once when the queue has no room (a rejected promise).
      const pending = deps.bulkhead.acquire(ac, deps.tenant(req))
      const decidedAt = performance.now()
      permit = await pending.catch(err => { throw Object.assign(err as Error, { decidedAt }) })
    } catch (err) {
      reply.raw.off('close', onClose)
      return rejected(deps, req, reply, err as Error & { decidedAt: number }, entered, onReject, admission)
    }
    deps.metrics.permitWait(permit.waitedMs / 1000)
    admission?.setAttributes({
      'watertight.bulkhead.decision': permit.waitedMs > 0 ? 'queued' : 'admitted',
      'watertight.bulkhead.permit_wait_ms': permit.waitedMs,
    })
    admission?.end()
    try {
      const attributes = { 'watertight.lane': deps.lane, 'watertight.deadline_ms': deps.deadlineMs }
      return send(reply, await inRequestSpan(req, 'bulkhead.execution', { attributes }, () => execute(deps, handler, req, ac)))
    } catch (err) {
      if (ac.reason === DISCONNECTED) return reply.hijack()
      throw err
    } finally {
      // The permit comes back now even if the work ignores the signal and runs on.
      permit.release()
      ac.abort(FINISHED)
      reply.raw.off('close', onClose)
    }
  }
}

/** A rejected arrival: counted, timed (Server-Timing), and answered by the lane's own policy. */
async function rejected (
  deps: AdmissionDeps,
  req: FastifyRequest,
  reply: FastifyReply,
  err: Error & { decidedAt: number },
  entered: number,
  onReject: RejectHandler,
  span: Span | undefined
): Promise<unknown> {
  if (!(err instanceof BulkheadRejected)) { failed(span, err); span?.end(); throw err }
  span?.setAttributes({ 'watertight.bulkhead.decision': 'rejected', 'watertight.bulkhead.reason': err.reason })
  if (err.reason === 'aborted') { span?.end(); return reply.hijack() }
  deps.metrics.rejection(err.reason)
  // How long admission took to decide (INV-BH-02 asks < 5 ms), and how long the
  // request had been in the process by then (parsing, validation, event-loop wait).
  // And, once the lane's policy has its answer (a compensated quote or a queued
  // screening is committed first), how long the whole request took in the lane.
  const decided = err.reason === 'queue_timeout' ? performance.now() : err.decidedAt
  const timing = `admit;desc="${err.reason}";dur=${(decided - entered).toFixed(3)}, inproc;dur=${reply.elapsedTime.toFixed(3)}`
  // The lane's answer is written under the admission span (a compensated quote's commit nests in it).
  let answer: LaneResult
  try {
    answer = await underSpan(req, span, async () => await onReject(err.reason, req, err.fair))
    span?.setAttribute('watertight.bulkhead.answer', answer.outcome ?? 'shed')
  } catch (e) {
    failed(span, e)
    throw e
  } finally {
    span?.end()
  }
  reply.header('server-timing', `${timing}, answer;dur=${reply.elapsedTime.toFixed(3)}`)
  return send(reply, answer)
}

/** The handler under the hard deadline: whichever comes first, its result or the abort. */
async function execute (
  deps: AdmissionDeps, handler: LaneHandler, req: FastifyRequest, ac: Canceller
): Promise<LaneResult> {
  const deadline = setTimeout(() => { ac.abort(new AppError('ERR_DEADLINE_EXCEEDED', { detail: `execution exceeded ${deps.deadlineMs} ms` })) }, deps.deadlineMs)
  const stopped = new Promise<never>((_resolve, reject) => ac.onAbort(reject))
  stopped.catch(() => {})
  const exec: Execution = {
    get signal () { return ac.signal },
    cancel: ac,
    db: executionDb(deps.pool, ac, deps.recovery, traceOf(req)),
  }
  try {
    return await Promise.race([handler(req, exec), stopped])
  } catch (err) {
    if (isAppError(ac.reason) && ac.reason.code === 'ERR_DEADLINE_EXCEEDED') {
      deps.metrics.rejection('deadline')
      throw ac.reason
    }
    throw err
  } finally {
    clearTimeout(deadline)
  }
}

/** A lane's answer on its reply. */
export function send (reply: FastifyReply, r: LaneResult): FastifyReply {
  if (r.headers) for (const [k, v] of Object.entries(r.headers)) reply.header(k, v)
  return reply.code(r.status).send(r.body)
}
