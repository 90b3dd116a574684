import t from 'tap'
import { newId } from '../shared/ids.ts'

const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

t.test('a new id is a UUIDv7 whose first 48 bits are its time in milliseconds', async t => {
  const now = Date.UTC(2026, 11, 2, 15, 0, 0, 123)
  const id = newId(now)
  t.match(id, V7, 'version 7, RFC 9562 variant')
  t.equal(parseInt(id.slice(0, 8) + id.slice(9, 13), 16), now)
  t.equal(newId(0).slice(0, 13), '00000000-0000', 'the epoch itself is padded, not shortened')
})

t.test('ids sort by the time they were made, and never repeat', async t => {
  const ids = Array.from({ length: 1_000 }, (_, i) => newId(1_764_000_000_000 + i))
  t.same([...ids].sort(), ids, 'a later millisecond sorts after an earlier one')
  const same = Array.from({ length: 10_000 }, () => newId(1_764_000_000_000))
  t.equal(new Set(same).size, same.length, '10,000 ids in one millisecond are all different (74 random bits)')
  t.ok(same.every(id => V7.test(id)))
})
