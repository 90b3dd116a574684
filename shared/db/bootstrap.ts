// Database bootstrap shared by `npm start` and the tools: start the embedded
// server unless DATABASE_URL names one, create the database, migrate, and
// provision the lane roles. Returns the superuser URL and one URL per role.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import pg from 'pg'
import { dbRoles } from '../lanes.ts'
import { spawnEmbedded, type EmbeddedServer } from './embedded.ts'
import { migrate } from './migrate.ts'

/** Where the embedded server's Unix socket is (unix_socket_directories, set in embedded.ts). */
export const EMBEDDED_SOCKET_DIR = '/tmp'

export interface LocalSecrets { pgPassword: string, rolePasswords: Record<string, string>, adminToken: string }

/** Secrets of a local run, made once and kept in .data/secrets.json (0600). */
export function localSecrets (dataDir: string, env: Record<string, string | undefined> = process.env): LocalSecrets {
  const file = path.join(dataDir, 'secrets.json')
  const rand = (): string => crypto.randomBytes(18).toString('base64url')
  const s: LocalSecrets = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) as LocalSecrets : { pgPassword: rand(), rolePasswords: {}, adminToken: rand() }
  for (const r of dbRoles(env)) s.rolePasswords[r.role] ??= rand()
  fs.mkdirSync(dataDir, { recursive: true })
  fs.writeFileSync(file, JSON.stringify(s, null, 2), { mode: 0o600 })
  return s
}

export interface Bootstrapped {
  superUrl: string
  roleUrl (role: string): string
  embedded: EmbeddedServer | undefined
}

export async function bootstrapDatabase (opts: {
  dataDir: string
  port: number
  database: string
  secrets: LocalSecrets
  databaseUrl?: string | undefined
  log: (m: string) => void
  compiledDaemon?: string
}): Promise<Bootstrapped> {
  let embedded: EmbeddedServer | undefined
  let superUrl: string
  if (opts.databaseUrl) {
    superUrl = opts.databaseUrl
  } else {
    opts.log(`starting embedded PostgreSQL on 127.0.0.1:${opts.port} (data in ${path.join(opts.dataDir, 'pg')})`)
    embedded = await spawnEmbedded({ dataDir: path.join(opts.dataDir, 'pg'), port: opts.port, password: opts.secrets.pgPassword }, opts.compiledDaemon)
    const admin = new pg.Client({ connectionString: embedded.url('postgres') })
    await admin.connect()
    const { rowCount } = await admin.query('select 1 from pg_database where datname = $1', [opts.database])
    if (!rowCount) await admin.query(`create database "${opts.database}"`)
    await admin.end()
    superUrl = embedded.url(opts.database)
  }
  await migrate({ databaseUrl: superUrl, rolePasswords: opts.secrets.rolePasswords, log: () => {} })
  const roleUrl = (role: string): string => {
    const u = new URL(superUrl)
    u.username = role
    u.password = opts.secrets.rolePasswords[role] ?? ''
    // On the embedded server the fleet's processes connect through its Unix
    // socket (in /tmp, the server's default; password auth as over TCP): a query
    // costs the client about half the system time of loopback TCP, and the server
    // less too. DATABASE_URL servers keep TCP.
    if (embedded) u.searchParams.set('host', EMBEDDED_SOCKET_DIR)
    return u.toString()
  }
  return { superUrl, roleUrl, embedded }
}
