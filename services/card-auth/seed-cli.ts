// `npm run seed:cards -- N`: load N card accounts for load tests into the
// database of the local run (.data/credentials.json) or DATABASE_URL.
import fs from 'node:fs'
import { Type } from 'typebox'
import { loadConfig } from '../../shared/config.ts'
import { createClient } from '../../shared/db/pool.ts'
import { seedDemoCards, seedLoadCards } from './seed.ts'

// `demo`: the demo accounts; prints them as JSON (npm start uses this).
const demo = process.argv[2] === 'demo'
const n = demo ? 1 : Number(process.argv[2] ?? '1000')
if (!Number.isInteger(n) || n < 1 || n > 1_000_000) {
  console.error('usage: npm run seed:cards -- <N between 1 and 1000000>')
  process.exit(2)
}
let url = loadConfig(Type.Object({ DATABASE_URL: Type.Optional(Type.String({ pattern: '^postgres(ql)?://' })) }), process.env).DATABASE_URL
if (!url && fs.existsSync('.data/credentials.json')) url = (JSON.parse(fs.readFileSync('.data/credentials.json', 'utf8')) as { databaseUrl: string }).databaseUrl
if (!url) {
  console.error('no database: start the fleet with npm start first, or set DATABASE_URL')
  process.exit(2)
}
const client = createClient(url, 'watertight-seed')
await client.connect()
if (demo) {
  console.log(JSON.stringify(await seedDemoCards(client)))
  await client.end()
  process.exit(0)
}
const added = await seedLoadCards(client, n)
await client.end()
console.log(`card accounts tok_load_000001..tok_load_${String(n).padStart(6, '0')}: ${added} added, ${n - added} already there`)
