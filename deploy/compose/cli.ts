// `npm run compose:up`: the real Compose stack from one command, on a machine
// with no image registry too (deploy/standin/), printing what `npm start` prints
// and writing the same .data/credentials.json. `npm run compose:down [-- --volumes]`
// stops and removes it (with --volumes, its database too).
// Lanes scale with <LANE>_REPLICAS: `CARD_AUTH_REPLICAS=2 npm run compose:up`; the
// gateway with GATEWAY_REPLICAS, on consecutive ports from GATEWAY_PUBLISHED_PORT,
// sharing the retry limits in the stack's redis.
import path from 'node:path'
import { envPrefix, LANE_NAMES, type LaneName } from '../../shared/lanes.ts'
import {
  buildImages, composeCommand, down, ensureBaseImages, ensureEngine, ensureSecrets, expectedContainers,
  demoApiKey, ROOT, stackOf, StackError, up, waitHealthy, writeCredentials, type StackOptions,
} from './stack.ts'

const say = (line: string): void => { process.stderr.write(`[compose] ${line}\n`) }

function options (env: NodeJS.ProcessEnv): StackOptions {
  const replicas: Partial<Record<LaneName, number>> = {}
  for (const lane of LANE_NAMES) {
    const name = `${envPrefix(lane)}REPLICAS`
    const v = env[name]
    if (v === undefined || v === '') continue
    if (!/^[1-9][0-9]?$/.test(v)) throw new StackError(`${name}=${v}: give a whole number of replicas from 1 to 99`, 2)
    replicas[lane] = Number(v)
  }
  const port = (name: string): number | undefined => {
    const v = env[name]
    if (v === undefined || v === '') return undefined
    if (!/^[0-9]{1,5}$/.test(v) || Number(v) < 1 || Number(v) > 65535) throw new StackError(`${name}=${v}: give a TCP port from 1 to 65535`, 2)
    return Number(v)
  }
  const project = env.COMPOSE_PROJECT_NAME || 'watertight'
  if (!/^[a-z0-9][a-z0-9_-]*$/.test(project)) throw new StackError(`COMPOSE_PROJECT_NAME=${project}: lower-case letters, digits, _ and - only`, 2)
  const g = env.GATEWAY_REPLICAS
  if (g !== undefined && g !== '' && !/^[1-9]$/.test(g)) throw new StackError(`GATEWAY_REPLICAS=${g}: give a whole number of gateways from 1 to 9`, 2)
  return { project, replicas, gateways: g ? Number(g) : 1, gatewayPort: port('GATEWAY_PUBLISHED_PORT'), deckPort: port('DECK_PUBLISHED_PORT'), log: say }
}

async function main (cmd: string | undefined, args: string[]): Promise<void> {
  const o = options(process.env)
  if (cmd === 'down') {
    await ensureEngine(say)
    await down(stackOf(await composeCommand(), o), { volumes: args.includes('--volumes') })
    say(`stack ${o.project} stopped and removed${args.includes('--volumes') ? ', its volumes too' : ' (its database volume kept: --volumes removes it)'}`)
    return
  }
  if (cmd !== 'up') throw new StackError('usage: node --import tsx deploy/compose/cli.ts up | down [--volumes]', 2)
  const t0 = Date.now()
  await ensureEngine(say)
  const compose = await composeCommand()
  const base = await ensureBaseImages(say)
  await buildImages(base, say)
  const secrets = ensureSecrets()
  const credsFile = path.join(ROOT, '.data/credentials.json')
  const apiKey = demoApiKey(credsFile)
  const s = stackOf(compose, o)
  await up(s, o)
  await waitHealthy(s, expectedContainers(o))
  const creds = await writeCredentials(s, o, { apiKey, adminToken: secrets.ADMIN_TOKEN! }, credsFile)
  const card = creds.demoCards[0]!
  const scaled = [...LANE_NAMES.filter(l => (o.replicas?.[l] ?? 1) > 1).map(l => `${l}×${o.replicas![l]}`), ...((o.gateways ?? 1) > 1 ? [`gateway×${o.gateways}`] : [])].join(', ')
  say(`stack ${o.project} is up and healthy in ${((Date.now() - t0) / 1000).toFixed(0)} s${scaled ? ` (${scaled})` : ''}
  gateway      ${creds.gatewayUrls.join(' ')}
  deck         ${creds.deckUrl}   (admin token: ${creds.adminToken})
  API key      ${creds.apiKey}
  demo cards   ${creds.demoCards.slice(0, 2).map(c => c.token).join(', ')}
  credentials  ${credsFile}
  try:
    curl -s -X POST ${creds.gatewayUrl}/v1/authorizations \\
      -H "Authorization: Bearer ${creds.apiKey}" -H "Idempotency-Key: demo-$(date +%s)" \\
      -H "Content-Type: application/json" \\
      -d '{"merchantId":"m_demo","cardToken":"${card.token}","amount":{"value":1250,"currency":"${card.currency}"}}'
  stop: npm run compose:down`)
}

await main(process.argv[2], process.argv.slice(3)).catch((err: unknown) => {
  if (err instanceof StackError) { say(err.message); process.exit(err.exitCode) }
  throw err
})
