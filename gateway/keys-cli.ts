// `npm run keys -- create <client-id>` prints a new API key (shown once; only its
// SHA-256 is stored); `revoke <client-id>` revokes every live key of a client;
// `list` shows clients and key states, never keys. The gateway picks up changes
// within seconds without a restart. File: API_KEYS_FILE or .data/api-keys.json.
import { Type } from 'typebox'
import { createKey, readKeyFile, revokeClient } from '../shared/api-keys.ts'
import { loadConfig } from '../shared/config.ts'
import { GATEWAY_ENV } from './config.ts'

const file = loadConfig(Type.Object({ API_KEYS_FILE: GATEWAY_ENV.properties.API_KEYS_FILE }), process.env).API_KEYS_FILE
const [cmd, clientId] = process.argv.slice(2)
const usage = (): never => { console.error('usage: npm run keys -- create <client-id> | revoke <client-id> | list'); process.exit(2) }

try {
  if (cmd === 'create' && clientId) {
    console.log(createKey(file, clientId))
  } else if (cmd === 'revoke' && clientId) {
    const n = revokeClient(file, clientId)
    console.log(`revoked ${n} key(s) of ${clientId}`)
    if (n === 0) process.exit(1)
  } else if (cmd === 'list') {
    for (const k of readKeyFile(file).keys) console.log(`${k.clientId}\t${k.hash.slice(0, 12)}…\tcreated ${k.createdAt}\t${k.revokedAt ? `revoked ${k.revokedAt}` : 'live'}`)
  } else {
    usage()
  }
} catch (err) {
  console.error((err as Error).message)
  process.exit(2)
}
