// Per-lane PostgreSQL roles, derived from the lane table so the role's
// CONNECTION LIMIT is the lane's fleet-wide pool budget (INV-BH-03). Each role
// may use its own schema only (INV-BH-01). Idempotent: run after every migrate.
import type pg from 'pg'
import { dbRoles } from '../lanes.ts'

const ident = (s: string): string => {
  if (!/^[a-z_][a-z0-9_]*$/.test(s)) throw new Error(`bad identifier ${s}`)
  return `"${s}"`
}
const literal = (s: string): string => `'${s.replaceAll("'", "''")}'`

export async function provisionRoles (
  client: pg.Client | pg.PoolClient,
  passwords: Record<string, string>,
  env: Record<string, string | undefined> = process.env
): Promise<void> {
  const { rows } = await client.query<{ db: string }>('select current_database() as db')
  const db = rows[0]!.db
  const version = (await client.query<{ v: number }>("select current_setting('server_version_num')::int as v")).rows[0]!.v
  await client.query(`revoke all on database ${ident(db)} from public`)
  for (const r of dbRoles(env)) {
    const password = passwords[r.role]
    if (!password) throw new Error(`no password for role ${r.role}`)
    const role = ident(r.role)
    await client.query(`do $$ begin
      if not exists (select 1 from pg_roles where rolname = ${literal(r.role)}) then
        create role ${role} login;
      end if; end $$`)
    await client.query(`alter role ${role} with login nosuperuser nocreatedb nocreaterole noinherit connection limit ${Number(r.connectionLimit)} password ${literal(password)}`)
    await client.query(`alter role ${role} set statement_timeout = ${Number(r.statementTimeoutMs)}`)
    await client.query(`alter role ${role} set idle_in_transaction_session_timeout = ${Number(r.idleInTxTimeoutMs)}`)
    // A backend whose client vanished (deadline abort destroys the socket) stops its query within 1 s.
    await client.query(`alter role ${role} set client_connection_check_interval = 1000`)
    await client.query(`grant connect on database ${ident(db)} to ${role}`)
    await client.query(`grant usage on schema ${ident(r.schema)} to ${role}`)
    await client.query(`grant select, insert, update, delete on all tables in schema ${ident(r.schema)} to ${role}`)
    await client.query(`grant usage, select on all sequences in schema ${ident(r.schema)} to ${role}`)
    await client.query(`grant execute on all functions in schema ${ident(r.schema)} to ${role}`)
    // The workers vacuum the claim table themselves (shared/queue/vacuum.ts says why). MAINTAIN exists from 17 on.
    if (r.schema === 'jobs' && version >= 170000) await client.query(`grant maintain on table jobs.jobs_hot to ${role}`)
    // Lanes that own queues may enqueue through jobs.enqueue() / jobs.enqueue_many()
    // and nothing else of the queue schema.
    if (r.enqueues) {
      await client.query(`grant usage on schema jobs to ${role}`)
      await client.query(`grant execute on function jobs.enqueue(text, text, jsonb, integer, integer, integer, text) to ${role}`)
      await client.query(`grant execute on function jobs.enqueue_many(text, text, jsonb[], text[], integer, integer, integer) to ${role}`)
    }
  }
}
