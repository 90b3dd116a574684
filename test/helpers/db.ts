// Each test file gets its own database, copied from the migrated template, and
// its own lane roles (a unique prefix), so parallel files never share a role's
// CONNECTION LIMIT. Everything is dropped at teardown.
import crypto from 'node:crypto'
import fs from 'node:fs'
import pg from 'pg'
import type { Test } from 'tap'
import { provisionRoles } from '../../shared/db/roles.ts'
import { dbRoles, type LaneName, laneLimits } from '../../shared/lanes.ts'
import { STATE_FILE } from '../setup/state.ts'

export interface TestDb {
  name: string
  prefix: string
  /** env entries that make lane processes use this database's roles */
  env: Record<string, string>
  superUrl: string
  pool: pg.Pool
  roleUrl (role: string): string
  laneUrl (lane: LaneName, extraEnv?: Record<string, string>): string
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<R[]>
  /** Connections per role in pg_stat_activity right now. */
  connectionsByRole (): Promise<Record<string, number>>
}

function state (): { superUrl: string, template: string } {
  return JSON.parse(fs.readFileSync(STATE_FILE, 'utf8')) as { superUrl: string, template: string }
}

const withDb = (url: string, db: string): string => { const u = new URL(url); u.pathname = '/' + db; return u.toString() }

export async function testDatabase (t: Test, roleEnv: Record<string, string> = {}): Promise<TestDb> {
  const s = state()
  const suffix = crypto.randomBytes(4).toString('hex')
  const name = `wt_test_${suffix}`
  const prefix = `t${suffix}_`
  const admin = new pg.Client({ connectionString: s.superUrl })
  await admin.connect()
  await admin.query(`create database ${name} template ${s.template}`)
  await admin.end()
  const superUrl = withDb(s.superUrl, name)
  const env = { ROLE_PREFIX: prefix, ...roleEnv }
  const passwords = Object.fromEntries(dbRoles(env).map(r => [r.role, crypto.randomBytes(9).toString('hex')]))
  const pool = new pg.Pool({ connectionString: superUrl, max: 4 })
  // pool.end() resolves once it has asked its idle clients to close, not once they
  // have: one still closing can meet the forced drop below and get 57P01 on its way
  // out. Expected then; an idle client's error before that stays a crash.
  let ending = false
  pool.on('error', err => { if (!ending) throw err })
  const c = await pool.connect()
  await provisionRoles(c, passwords, env)
  c.release()

  const roleUrl = (role: string): string => {
    const u = new URL(superUrl)
    u.username = role
    u.password = passwords[role] ?? ''
    return u.toString()
  }
  t.teardown(async () => {
    ending = true
    await pool.end()
    const a = new pg.Client({ connectionString: s.superUrl })
    await a.connect()
    await a.query(`drop database if exists ${name} with (force)`)
    for (const r of Object.keys(passwords)) await a.query(`drop role if exists "${r}"`)
    await a.end()
  })
  return {
    name,
    prefix,
    env,
    superUrl,
    pool,
    roleUrl,
    laneUrl: (lane, extraEnv = {}) => roleUrl(laneLimits(lane, { ...env, ...extraEnv }).db.role),
    query: async (sql, params) => (await pool.query(sql, params)).rows,
    connectionsByRole: async () => {
      const { rows } = await pool.query<{ usename: string, n: string }>('select usename, count(*) as n from pg_stat_activity where usename like $1 group by usename', [prefix + '%'])
      return Object.fromEntries(rows.map(r => [r.usename.slice(prefix.length), Number(r.n)]))
    },
  }
}
