// Per-lane roles (INV-BH-01, INV-BH-03): each role's CONNECTION LIMIT is its
// lane's fleet-wide pool, with its own timeouts, and it can use its own schema
// only. Migrations are safe when two processes run them at once.
import t from 'tap'
import crypto from 'node:crypto'
import fs from 'node:fs'
import pg from 'pg'
import { migrate } from '../shared/db/migrate.ts'
import { dbRoles } from '../shared/lanes.ts'
import { testDatabase } from './helpers/db.ts'
import { STATE_FILE } from './setup/state.ts'

const db = await testDatabase(t)

t.test('each role has the lane table limit and timeouts', async t => {
  const rows = await db.query<{ rolname: string, rolconnlimit: number, rolconfig: string[] }>('select rolname, rolconnlimit, rolconfig from pg_roles where rolname like $1 order by rolname', [db.prefix + '%'])
  const got = Object.fromEntries(rows.map(r => [r.rolname.slice(db.prefix.length), r]))
  t.same(Object.fromEntries(Object.entries(got).map(([k, v]) => [k, v.rolconnlimit])),
    { card_auth_ds: 40, deck_ds: 2, fraud_ds: 15, jobs_ds: 10, tax_ds: 5 })
  for (const r of rows) {
    t.ok(r.rolconfig.some(c => c.startsWith('statement_timeout=')), `${r.rolname} statement_timeout`)
    t.ok(r.rolconfig.some(c => c.startsWith('idle_in_transaction_session_timeout=')), `${r.rolname} idle_in_transaction_session_timeout`)
  }
})

t.test('a lane role can use its own schema and no other', async t => {
  const schemas: Record<string, string> = { card_auth_ds: 'card_auth.authorizations', fraud_ds: 'fraud.screenings', tax_ds: 'tax.quotes' }
  for (const [role, own] of Object.entries(schemas)) {
    const c = new pg.Client({ connectionString: db.roleUrl(db.prefix + role) })
    await c.connect()
    await t.resolves(c.query(`select count(*) from ${own}`), `${role} reads ${own}`)
    for (const other of Object.values(schemas).filter(s => s !== own)) {
      await t.rejects(c.query(`select count(*) from ${other}`), { code: '42501' }, `${role} cannot read ${other}`)
    }
    await t.rejects(c.query('create table public.x (a int)'), { code: '42501' }, `${role} cannot create in public`)
    await c.end()
  }
  // The deck's role reaches the queue schema only: no lane's data.
  const deck = new pg.Client({ connectionString: db.roleUrl(db.prefix + 'deck_ds') })
  await deck.connect()
  await t.resolves(deck.query('select count(*) from jobs.queues'), 'deck_ds reads jobs.queues')
  for (const other of Object.values(schemas)) await t.rejects(deck.query(`select count(*) from ${other}`), { code: '42501' }, `deck_ds cannot read ${other}`)
  await deck.end()
})

t.test('the role connection limit is enforced by PostgreSQL', async t => {
  const url = db.roleUrl(db.prefix + 'tax_ds')
  const clients: pg.Client[] = []
  for (let i = 0; i < 5; i++) { const c = new pg.Client({ connectionString: url }); await c.connect(); clients.push(c) }
  const sixth = new pg.Client({ connectionString: url })
  await t.rejects(sixth.connect(), { code: '53300' }, 'the 6th tax_ds connection is refused')
  await Promise.all(clients.map(c => c.end()))
})

t.test('two migrations started at once apply everything exactly once', async t => {
  const { superUrl } = JSON.parse(fs.readFileSync(STATE_FILE, 'utf8')) as { superUrl: string }
  const name = `wt_mig_${crypto.randomBytes(3).toString('hex')}`
  const admin = new pg.Client({ connectionString: superUrl })
  await admin.connect()
  await admin.query(`create database ${name}`)
  const u = new URL(superUrl); u.pathname = '/' + name
  const env = { ROLE_PREFIX: `m${crypto.randomBytes(3).toString('hex')}_` }
  const passwords = Object.fromEntries(dbRoles(env).map(r => [r.role, 'pw']))
  const opts = { databaseUrl: u.toString(), rolePasswords: passwords, env }
  await Promise.all([migrate(opts), migrate(opts)])
  const c = new pg.Client({ connectionString: u.toString() })
  await c.connect()
  const { rows } = await c.query<{ name: string, n: string }>('select name, count(*) as n from pgmigrations group by name order by name')
  t.ok(rows.length >= 4, `${rows.length} migrations applied`)
  t.ok(rows.every(r => r.n === '1'), 'each once')
  await c.end()
  await admin.query(`drop database ${name} with (force)`)
  for (const r of Object.keys(passwords)) await admin.query(`drop role "${r}"`)
  await admin.end()
})
