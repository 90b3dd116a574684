// Lane state machine (MC-ST-01).
//   NORMAL     -> SATURATED  when every permit is busy and the queue is full
//   SATURATED  -> RECOVERING when active drops below saturatedExitBelow (80%) of
//                            permits; the hysteresis keeps the lane from flapping
//                            at exactly 100%
//   RECOVERING -> SATURATED  on saturation again
//   RECOVERING -> NORMAL     once active has stayed below recoverBelow (60%) for
//                            recoverWindowMs (10 s) without a break
export const LANE_STATES = ['NORMAL', 'SATURATED', 'RECOVERING'] as const
export type LaneStateName = typeof LANE_STATES[number]

export interface LaneStateOptions {
  permits: number
  queueCapacity: number
  saturatedExitBelow: number
  recoverBelow: number
  recoverWindowMs: number
  now?: () => number
  onTransition?: (from: LaneStateName, to: LaneStateName) => void
}

export class LaneState {
  #state: LaneStateName = 'NORMAL'
  #belowSince: number | undefined
  #active = 0
  readonly #o: Required<Omit<LaneStateOptions, 'onTransition'>> & Pick<LaneStateOptions, 'onTransition'>

  constructor (opts: LaneStateOptions) {
    this.#o = { now: () => performance.now(), ...opts }
  }

  get state (): LaneStateName { return this.#state }

  observe (active: number, queued: number): LaneStateName {
    const o = this.#o
    const now = o.now()
    this.#active = active
    const saturated = active >= o.permits && queued >= o.queueCapacity
    if (active < o.recoverBelow * o.permits) this.#belowSince ??= now
    else this.#belowSince = undefined

    if (saturated) {
      this.#go('SATURATED')
    } else if (this.#state === 'SATURATED' && active < o.saturatedExitBelow * o.permits) {
      this.#go('RECOVERING')
    }
    this.tick(now)
    return this.#state
  }

  /** Called on a timer too: the recovery window can end while no request arrives. */
  tick (now = this.#o.now()): LaneStateName {
    if (this.#state === 'RECOVERING' && this.#belowSince !== undefined && now - this.#belowSince >= this.#o.recoverWindowMs) {
      this.#go('NORMAL')
    }
    return this.#state
  }

  #go (to: LaneStateName): void {
    if (to === this.#state) return
    const from = this.#state
    this.#state = to
    // Entering RECOVERING starts the window only from the moment active is low.
    if (to === 'RECOVERING' && !(this.#active < this.#o.recoverBelow * this.#o.permits)) this.#belowSince = undefined
    this.#o.onTransition?.(from, to)
  }
}
