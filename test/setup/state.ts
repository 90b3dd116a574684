import path from 'node:path'
import { dbRoles } from '../../shared/lanes.ts'

export const STATE_FILE = path.resolve('.data/test-pg-state.json')
export const TEMPLATE_DB = 'wt_template'
export const TEMPLATE_ROLE_PREFIX = 'tpl_'

export function templatePasswords (): Record<string, string> {
  return Object.fromEntries(dbRoles({ ROLE_PREFIX: TEMPLATE_ROLE_PREFIX }).map(r => [r.role, 'template-only']))
}
