// An unregistered claimer of a limited queue (a tool, a test) takes only the
// room no live worker is dealt: the live workers' fair shares are theirs before
// they have grown into them, so such a claimer cannot starve a worker.
import t from 'tap'
import { claim } from '../shared/queue/claim.ts'
import { workerGone, workerSeen } from '../shared/queue/workers.ts'
import { testDatabase } from './helpers/db.ts'
import { createQueue, enqueueMany } from './helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'dealt', 4)

t.test('the live workers\' room is left to them; what they cannot use is not', async t => {
  await enqueueMany(db, 'dealt', 'noop', 20)
  // A live worker with 3 local slots: 3 of the 4 are dealt to it, though it holds no share yet.
  await workerSeen(db.pool, 'w-live', { dealt: 3 }, 600_000)
  t.teardown(() => workerGone(db.pool, 'w-live'))
  const got = await claim(db.pool, { workerId: 'tool', slots: { dealt: 10 } })
  t.equal(got.length, 1, 'the unregistered claimer got only the room left over (4 - 3)')
  await workerGone(db.pool, 'w-live')
  const more = await claim(db.pool, { workerId: 'tool', slots: { dealt: 10 } })
  t.equal(more.length, 3, 'with no live worker, the rest of the limit is its')
  const [{ n }] = await db.query<{ n: number }>("select count(*)::int as n from jobs.jobs_hot where queue = 'dealt' and status <> 'pending'") as [{ n: number }]
  t.equal(n, 4, 'never more than MaxWorkers 4 claimed')
})
