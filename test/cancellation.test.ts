// The lanes' per-request stop (shared/cancellation.ts): callbacks run once, in
// order, removable; a late one runs at once; the AbortSignal made on demand
// follows it; an AbortSignal can stand in for one.
import t from 'tap'
import { Canceller, cancellationOf } from '../shared/cancellation.ts'

t.test('callbacks run once, in the order they came, with the reason; a removed one does not', async t => {
  const c = new Canceller()
  const seen: string[] = []
  c.onAbort(r => seen.push(`a:${String(r)}`))
  const off = c.onAbort(() => seen.push('removed'))
  c.onAbort(r => seen.push(`b:${String(r)}`))
  off()
  t.equal(c.aborted, false)
  c.abort('deadline')
  c.abort('later')
  t.same(seen, ['a:deadline', 'b:deadline'], 'each once, in order, none removed ran')
  t.equal(c.aborted, true)
  t.equal(c.reason, 'deadline', 'the first reason stays')
  let late: unknown
  const noop = c.onAbort(r => { late = r })
  t.equal(late, 'deadline', 'a callback added after the stop runs at once')
  noop()
})

t.test('the AbortSignal follows the stop, made before or after it', async t => {
  const before = new Canceller()
  const s = before.signal
  t.equal(before.signal, s, 'one signal per canceller')
  t.equal(s.aborted, false)
  before.abort('gone')
  t.equal(s.aborted, true)
  t.equal(s.reason, 'gone')
  const after = new Canceller()
  after.abort('finished')
  t.equal(after.signal.aborted, true, 'made after the stop, it is aborted already')
  t.equal(after.signal.reason, 'finished')
})

t.test('an AbortSignal seen as a Cancellation', async t => {
  const ac = new AbortController()
  const c = cancellationOf(ac.signal)
  const seen: unknown[] = []
  c.onAbort(r => seen.push(r))
  const off = c.onAbort(() => seen.push('removed'))
  off()
  t.equal(c.aborted, false)
  ac.abort('bye')
  t.same(seen, ['bye'])
  t.equal(c.aborted, true)
  t.equal(c.reason, 'bye')
  const canceller = new Canceller()
  t.equal(cancellationOf(canceller), canceller, 'a Cancellation is passed through')
})
