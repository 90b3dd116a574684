// A pool reset (ReplaceablePool.replace, shared/db/pool.ts) that cannot do a
// step says so instead of swallowing it: here its own connection to end the old
// backends cannot be opened (nothing listens on the discard port). The swap
// itself still happens: new checkouts go to the new pool.
import pg from 'pg'
import t from 'tap'
import { ReplaceablePool, type ResetStep } from '../shared/db/pool.ts'

t.test('a reset whose own connection fails reports the step and still swaps the pool', async t => {
  const failed: Array<{ step: ResetStep, code: unknown }> = []
  const pools = new ReplaceablePool(
    () => new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:9/none', connectionTimeoutMillis: 1_000 }),
    (step, err) => failed.push({ step, code: (err as { code?: string }).code })
  )
  t.teardown(() => pools.end())
  const old = pools.current
  t.equal(await pools.replace(1_000), 0, 'no backend ended')
  t.same(failed, [{ step: 'connect', code: 'ECONNREFUSED' }], 'the failed connect is reported, with its error')
  t.not(pools.current, old, 'new checkouts go to a new pool')
})
