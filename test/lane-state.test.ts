import t from 'tap'
import { LaneState, type LaneStateName } from '../shared/lane-state.ts'

function machine () {
  let now = 0
  const transitions: string[] = []
  const s = new LaneState({
    permits: 10,
    queueCapacity: 2,
    saturatedExitBelow: 0.8,
    recoverBelow: 0.6,
    recoverWindowMs: 10_000,
    now: () => now,
    onTransition: (a: LaneStateName, b: LaneStateName) => transitions.push(`${a}->${b}`),
  })
  return { s, transitions, at: (ms: number) => { now = ms } }
}

t.test('NORMAL until every permit is busy and the queue is full', async t => {
  const { s, at } = machine()
  at(0)
  t.equal(s.observe(9, 2), 'NORMAL', '90% busy with a full queue is not saturation')
  t.equal(s.observe(10, 1), 'NORMAL', 'all permits busy but room in the queue')
  t.equal(s.observe(10, 2), 'SATURATED')
})

t.test('SATURATED -> RECOVERING below 80%, -> NORMAL after 10 s below 60%', async t => {
  const { s, transitions, at } = machine()
  at(0); s.observe(10, 2)
  at(100); t.equal(s.observe(9, 0), 'SATURATED', '90% is still saturated (hysteresis)')
  at(200); t.equal(s.observe(7, 0), 'RECOVERING', 'below 80% leaves SATURATED')
  at(300); t.equal(s.observe(5, 0), 'RECOVERING', 'below 60%: the window starts')
  at(9_000); t.equal(s.observe(7, 0), 'RECOVERING', 'back above 60% breaks the window')
  at(9_100); s.observe(4, 0)
  at(19_000); t.equal(s.tick(), 'RECOVERING', '9.9 s below 60% is not enough')
  at(19_100); t.equal(s.tick(), 'NORMAL', '10 s without a break returns to NORMAL')
  t.same(transitions, ['NORMAL->SATURATED', 'SATURATED->RECOVERING', 'RECOVERING->NORMAL'])
})

t.test('RECOVERING -> SATURATED on saturation again', async t => {
  const { s, at } = machine()
  at(0); s.observe(10, 2)
  at(10); s.observe(1, 0)
  t.equal(s.state, 'RECOVERING')
  at(20); t.equal(s.observe(10, 2), 'SATURATED')
})

t.test('a zero-queue lane saturates when every permit is busy', async t => {
  const s = new LaneState({
    permits: 15, queueCapacity: 0, saturatedExitBelow: 0.8, recoverBelow: 0.6, recoverWindowMs: 0,
  })
  t.equal(s.observe(14, 0), 'NORMAL')
  t.equal(s.observe(15, 0), 'SATURATED')
  t.equal(s.observe(3, 0), 'NORMAL', 'with a zero window it recovers at once')
})
