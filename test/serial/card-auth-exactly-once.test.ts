// Card authorization holds are never lost and never doubled:
//  - 1,000 authorizations against one account from many connections, half of
//    them retries of the same keys: balances exact, one authorization per key,
//    every approval has its hold and every hold its approval;
//  - a duplicate that arrives while the first is still in flight is told so at
//    once (409 ERR_IDEMPOTENCY_IN_PROGRESS, Retry-After), holding no permit on
//    the first one's locks; retried after the first ends, it replays its answer
//    (never a second hold);
//  - the lane killed with -9 in the middle of a burst: after a restart every 201
//    has its hold and no hold lacks its authorization.
import t, { type Test } from 'tap'
import pg from 'pg'
import { testDatabase, type TestDb } from '../helpers/db.ts'
import { call, eventually, sleep, type Res } from '../helpers/http.ts'
import { laneEnv, startProcess } from '../helpers/procs.ts'

const db = await testDatabase(t)
const START = 1_000_000
await db.query(`insert into card_auth.card_accounts (token, currency, available) values ('tok_once_1', 'EUR', ${START}), ('tok_once_2', 'EUR', ${START}), ('tok_once_3', 'EUR', 500)`)
const lane = await startProcess(t, 'card-auth', 'services/card-auth/main.ts', laneEnv('card-auth', db.env, db.laneUrl('card-auth')))

const authorize = (url: string, key: string, card: string, value: number, client = 'c-once'): Promise<Res> =>
  call(url + '/v1/authorizations', { json: { merchantId: 'm_once', cardToken: card, amount: { value, currency: 'EUR' } }, headers: { 'x-client-id': client, 'idempotency-key': key } })

async function invariants (t: Test, db: TestDb, card: string, start: number): Promise<void> {
  const [acct] = await db.query<{ available: string, held: string }>('select available, held from card_auth.card_accounts where token = $1', [card])
  const [sums] = await db.query<{ approved: string, holds: string, n_holds: string, n_approved: string }>(
    `select coalesce(sum(a.amount) filter (where a.status = 'approved'), 0) as approved,
            (select coalesce(sum(h.amount), 0) from card_auth.holds h where h.card_token = $1) as holds,
            (select count(*) from card_auth.holds h where h.card_token = $1) as n_holds,
            count(*) filter (where a.status = 'approved') as n_approved
       from card_auth.authorizations a where a.card_token = $1`, [card])
  t.equal(Number(acct!.available) + Number(acct!.held), start, `${card}: available + held is exactly the starting balance`)
  t.equal(acct!.held, sums!.holds, `${card}: held equals the sum of holds`)
  t.equal(sums!.approved, sums!.holds, `${card}: approved amounts equal hold amounts`)
  t.equal(sums!.n_approved, sums!.n_holds, `${card}: one hold per approval`)
  const orphans = await db.query("select h.id from card_auth.holds h left join card_auth.authorizations a on a.id = h.authorization_id where a.id is null or a.status <> 'approved'")
  t.equal(orphans.length, 0, 'no hold without its approved authorization')
}

t.test('1,000 concurrent authorizations, half of them retries: exact balances, one authorization per key', async t => {
  const keys = Array.from({ length: 500 }, (_, i) => `once-${i}`)
  const work = [...keys, ...keys].sort(() => Math.random() - 0.5)
  const results = new Map<string, Res[]>()
  let next = 0
  // 64 connections keep the lane busy without overflowing its 75 permits + 10 queue.
  await Promise.all(Array.from({ length: 64 }, async () => {
    while (next < work.length) {
      const key = work[next++]!
      let r: Res
      // A client that honours 429, 409 (the same key still in flight) and 503 (the
      // lane shedding under pressure: 64 clients keep its event loop busy) retries.
      do { r = await authorize(lane.url, key, 'tok_once_1', 7) } while ((r.status === 429 || r.status === 409 || r.status === 503) && (await sleep(20), true))
      results.set(key, [...(results.get(key) ?? []), r])
    }
  }))
  const all = [...results.values()].flat()
  t.equal(all.length, 1_000)
  t.ok(all.every(r => r.status === 201), `every request answered 201 (${all.filter(r => r.status !== 201).length} did not)`)
  for (const [key, rs] of results) {
    if (rs[0]!.body.id !== rs[1]!.body.id) { t.fail(`${key} got two authorization ids`); break }
  }
  t.equal(all.filter(r => r.headers['idempotent-replayed'] === 'true').length, 500, 'exactly one replay per key')
  const [{ n }] = await db.query<{ n: string }>("select count(*) as n from card_auth.authorizations where card_token = 'tok_once_1'") as [{ n: string }]
  t.equal(n, '500', 'one authorization per key')
  await invariants(t, db, 'tok_once_1', START)
  const [acct] = await db.query<{ held: string }>("select held from card_auth.card_accounts where token = 'tok_once_1'")
  t.equal(acct!.held, String(500 * 7), 'held is 500 approvals of 7')
})

t.test('a duplicate that arrives while the first is in flight is told so at once, then replays', async t => {
  // After the burst above the lane may still shed for a sample or two: wait until it admits again.
  t.ok(await eventually(async () => (await call(lane.url + '/health/ready')).status === 200, 10_000, 100), 'the lane is ready')
  const locker = new pg.Client({ connectionString: db.superUrl })
  await locker.connect()
  t.teardown(() => locker.end())
  await locker.query('begin')
  await locker.query("select * from card_auth.card_accounts where token = 'tok_once_3' for update")
  const first = authorize(lane.url, 'inflight-1', 'tok_once_3', 300)
  // The first holds its key's lock, waiting on the account row.
  await eventually(async () => (await db.query("select 1 from pg_locks l join pg_stat_activity a using (pid) where l.locktype = 'advisory' and a.usename = $1", [db.prefix + 'card_auth_ds'])).length > 0, 5_000, 20)
  const second = await authorize(lane.url, 'inflight-1', 'tok_once_3', 300)
  t.equal(second.status, 409, 'the duplicate is answered while the first is still running')
  t.equal(second.body.code, 'ERR_IDEMPOTENCY_IN_PROGRESS')
  t.equal(second.headers['retry-after'], '1', 'with Retry-After')
  t.equal((await call(lane.url + '/status')).body.active, 1, 'and holds no permit: only the first does')
  await locker.query('commit')
  const a = await first
  const b = await authorize(lane.url, 'inflight-1', 'tok_once_3', 300)
  t.equal(a.status, 201)
  t.equal(b.status, 201, 'retried after the first ended, it gets the answer')
  t.equal(a.body.id, b.body.id, 'same authorization')
  t.equal(b.headers['idempotent-replayed'], 'true', 'as a replay')
  await invariants(t, db, 'tok_once_3', 500)
  const third = await authorize(lane.url, 'inflight-2', 'tok_once_3', 300)
  t.equal(third.body.declineReason, 'insufficient_funds', 'and the funds were held exactly once')
})

t.test('kill -9 in the middle of a burst: every 201 has its hold, no hold without its authorization', async t => {
  // One instance at a time: the role's CONNECTION LIMIT is shared by every replica.
  await lane.kill()
  const lane2 = await startProcess(t, 'card-auth-2', 'services/card-auth/main.ts', laneEnv('card-auth', db.env, db.laneUrl('card-auth')))
  const ok: string[] = []
  let stop = false
  let i = 0
  const burst = Promise.all(Array.from({ length: 40 }, async () => {
    while (!stop) {
      const r = await authorize(lane2.url, `burst-${i++}`, 'tok_once_2', 3).catch(() => undefined)
      if (!r) return
      if (r.status === 201) ok.push(r.body.id)
    }
  }))
  await sleep(700)
  await lane2.kill('SIGKILL')
  stop = true
  await burst
  t.ok(ok.length > 20, `${ok.length} authorizations answered 201 before the kill`)
  const restarted = await startProcess(t, 'card-auth-3', 'services/card-auth/main.ts', laneEnv('card-auth', db.env, db.laneUrl('card-auth')))
  const rows = await db.query<{ id: string, status: string, has_hold: boolean }>('select a.id, a.status, h.id is not null as has_hold from card_auth.authorizations a left join card_auth.holds h on h.authorization_id = a.id where a.id = any($1::uuid[])', [ok])
  t.equal(rows.length, ok.length, 'every 201 is in the database')
  t.ok(rows.every(r => r.status === 'approved' && r.has_hold), 'every 201 has its hold')
  await invariants(t, db, 'tok_once_2', START)
  const after = await authorize(restarted.url, 'after-restart', 'tok_once_2', 3)
  t.equal(after.status, 201, 'the restarted lane authorizes')
})
