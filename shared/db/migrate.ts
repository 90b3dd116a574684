// Migrations: numbered .sql files in shared/db/migrations, applied by
// node-pg-migrate. Two processes booting at once wait on one blocking advisory
// lock (node-pg-migrate's own lock fails instead of waiting), so the second one
// finds everything applied. Roles are provisioned in the same critical section.
import pg from 'pg'
import { runner } from 'node-pg-migrate'
import { provisionRoles } from './roles.ts'
import { treePath } from '../tree.ts'

export const MIGRATIONS_DIR = treePath('shared/db/migrations')
const LOCK_KEY = 727_001 // arbitrary, fleet-wide constant

export interface MigrateOptions {
  /** A superuser (or owner) connection string. */
  databaseUrl: string
  /** Passwords of the lane roles, by role name. */
  rolePasswords: Record<string, string>
  env?: Record<string, string | undefined>
  log?: (msg: string) => void
}

export async function migrate (opts: MigrateOptions): Promise<void> {
  const client = new pg.Client({ connectionString: opts.databaseUrl })
  await client.connect()
  try {
    await client.query('select pg_advisory_lock($1)', [LOCK_KEY])
    await runner({
      dbClient: client,
      dir: MIGRATIONS_DIR,
      direction: 'up',
      migrationsTable: 'pgmigrations',
      count: Infinity,
      noLock: true,
      checkOrder: true,
      log: opts.log ?? (() => {}),
      verbose: false,
    })
    await provisionRoles(client, opts.rolePasswords, opts.env)
  } finally {
    await client.query('select pg_advisory_unlock($1)', [LOCK_KEY]).catch(() => {})
    await client.end()
  }
}
