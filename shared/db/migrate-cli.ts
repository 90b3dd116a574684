// `main.js migrate`: apply migrations and provision the per-lane roles on a
// database given by DATABASE_URL (a superuser or owner), for containers and
// clusters where `npm start` does not run. Each role's password comes from
// PG_ROLE_PASSWORD_<ROLE> (e.g. PG_ROLE_PASSWORD_CARD_AUTH_DS); all are required.
import { AppError } from '../errors.ts'
import { dbRoles } from '../lanes.ts'
import { migrate } from './migrate.ts'

export const passwordVar = (role: string): string => `PG_ROLE_PASSWORD_${role.replace(process.env.ROLE_PREFIX ?? '', '').toUpperCase()}`

const url = process.env.DATABASE_URL
const missing: string[] = url ? [] : ['DATABASE_URL']
const rolePasswords: Record<string, string> = {}
for (const r of dbRoles()) {
  const v = process.env[passwordVar(r.role)]
  if (!v || v.length < 12) missing.push(`${passwordVar(r.role)} (12+ characters)`)
  else rolePasswords[r.role] = v
}
if (missing.length > 0) {
  const err = new AppError('ERR_CONFIG_INVALID', { detail: `missing: ${missing.join(', ')}` })
  console.error(JSON.stringify({ level: 'fatal', code: err.code, msg: err.detail }))
  process.exit(1)
}
await migrate({ databaseUrl: url!, rolePasswords, log: m => console.log(m) })
console.log(JSON.stringify({ level: 'info', msg: 'migrated and provisioned roles', roles: Object.keys(rolePasswords) }))
