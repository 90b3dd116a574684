// The gateway listens with the backlog it is configured with (GATEWAY_LISTEN_BACKLOG),
// not Node's 511: read back from the kernel, where `ss` shows a listening
// socket's backlog as its Send-Q.
import { spawnSync } from 'node:child_process'
import t from 'tap'
import { startLoneGateway } from './helpers/gateway.ts'

const hasSs = spawnSync('ss', ['-V']).status === 0

t.test('the gateway listens with GATEWAY_LISTEN_BACKLOG', { skip: hasSs ? false : 'no ss (iproute2) on this machine' }, async t => {
  const somaxconn = Number(spawnSync('sysctl', ['-n', 'net.core.somaxconn'], { encoding: 'utf8' }).stdout.trim() || 4096)
  const want = Math.min(1_234, somaxconn)
  const gw = await startLoneGateway(t, { GATEWAY_LISTEN_BACKLOG: '1234' })
  const port = new URL(gw.url).port
  const out = spawnSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' }).stdout.trim()
  const fields = out.split(/\s+/)
  t.equal(fields[0], 'LISTEN', `the gateway's listening socket: ${out}`)
  t.equal(Number(fields[2]), want, `backlog ${want} (the kernel caps it at somaxconn ${somaxconn}), not Node's 511`)
})
