// A worker never asks for more of a queue than its MaxWorkers: with every slot
// of a limited queue its own, the NOTIFY of each new job costs no claim round
// trip (a lane that enqueues a job per shed request sends ~100 a second), and a
// raised limit is taken up at once.
import t from 'tap'
import { updateQueue } from '../shared/queue/admin.ts'
import { testDatabase } from './helpers/db.ts'
import { call, eventually } from './helpers/http.ts'
import { counts, createQueue, startWorker } from './helpers/queue.ts'

const db = await testDatabase(t)
await createQueue(db, 'cap-q', 2)
await createQueue(db, 'free-q', null)

interface Status { fetches: number, running: Record<string, number> }

t.test('NOTIFYs for a queue at its MaxWorkers fetch nothing; a raised limit is used', async t => {
  // No poll in the window: every fetch is a NOTIFY's or a job's.
  const w = await startWorker(t, db, ['cap-q', 'free-q'], { WORKER_POLL_MS: '60000' })
  const status = async (): Promise<Status> => (await call(`${w.url}/status`)).body as Status
  await db.query("select jobs.enqueue('cap-q', 'sleep', '{\"ms\": 60000}') from generate_series(1, 2)")
  t.ok(await eventually(async () => (await status()).running['cap-q'] === 2, 10_000, 50), 'the two slots of cap-q taken')
  const before = (await status()).fetches

  // Forty enqueues, forty NOTIFYs (one per statement), then one job on the other
  // queue: notifications reach a listener in commit order, so once that job is
  // archived the worker has seen all forty.
  for (let i = 0; i < 40; i++) await db.query("select jobs.enqueue('cap-q', 'sleep', '{\"ms\": 60000}')")
  await db.query("select jobs.enqueue('free-q', 'noop', '{}')")
  t.ok(await eventually(async () => (await counts(db, 'free-q')).archive === 1, 10_000, 50), 'the job of free-q ran and was completed')
  const fetches = (await status()).fetches - before
  // free-q's job: its claim and its completion (two cycles; a NOTIFY arriving
  // during a cycle adds at most one more).
  t.ok(fetches <= 3, `fetch round trips while cap-q was full: ${fetches} (≤ 3, none for cap-q's forty NOTIFYs)`)
  t.equal((await status()).running['cap-q'], 2, 'still two running on cap-q')

  await updateQueue(db.pool, 'cap-q', { maxWorkers: 4 })
  t.ok(await eventually(async () => (await status()).running['cap-q'] === 4, 10_000, 50), 'MaxWorkers raised to 4: two more claimed')
  t.equal((await counts(db, 'cap-q')).hot, 42, 'the rest still pending')
})
