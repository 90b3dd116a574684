// A function as an earlier migration made it, under another name, so a test or a
// bench can run it beside the current one (authorize_batch as 0009 made it, to
// compare decisions or cost).
import fs from 'node:fs'
import path from 'node:path'
import { MIGRATIONS_DIR } from '../../shared/db/migrate.ts'

/**
 * The CREATE FUNCTION of `schema.fn` in migration `number`'s Up section (e.g.
 * '0009'), renamed `schema.fn_<number>`.
 */
export function functionAsOf (number: string, qualifiedName: string): { name: string, sql: string } {
  const file = fs.readdirSync(MIGRATIONS_DIR).find(f => f.startsWith(`${number}_`) && f.endsWith('.sql'))
  if (!file) throw new Error(`no migration ${number}_*.sql in ${MIGRATIONS_DIR}`)
  const up = fs.readFileSync(path.join(MIGRATIONS_DIR, file), 'utf8').split('-- Down Migration')[0]!
  const escaped = qualifiedName.replace(/[.]/g, '\\.')
  const create = new RegExp(`create (or replace )?function ${escaped}\\([\\s\\S]*?\\$\\$;`).exec(up)?.[0]
  if (!create) throw new Error(`${file} does not create ${qualifiedName}`)
  const name = `${qualifiedName}_${number}`
  return { name, sql: create.replace(/^create (or replace )?function [^(]+\(/, `create or replace function ${name}(`) }
}
