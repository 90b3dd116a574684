// A TCP proxy in front of PostgreSQL that can freeze the connections it carries
// right now, as a hung middlebox leaves established connections black-holed:
// bytes stop flowing both ways (what arrives is read and dropped), nothing is
// closed or refused, and new connections still get through. A side that closes
// still closes the other, so a connection the client gives up frees its server
// backend (and its slot under the role's CONNECTION LIMIT).
import net from 'node:net'
import type { Test } from 'tap'

export interface FreezeProxy { port: number, connections: number, freeze (): number }

export async function freezeProxy (t: Test, target: { host: string, port: number }): Promise<FreezeProxy> {
  const pairs = new Set<{ client: net.Socket, server: net.Socket }>()
  const proxy = net.createServer(client => {
    const server = net.connect(target.port, target.host)
    const pair = { client, server }
    pairs.add(pair)
    client.pipe(server)
    server.pipe(client)
    const close = (): void => { pairs.delete(pair); client.destroy(); server.destroy() }
    client.once('close', close).on('error', close)
    server.once('close', close).on('error', close)
  })
  await new Promise<void>(resolve => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>(resolve => {
    for (const p of pairs) { p.client.destroy(); p.server.destroy() }
    proxy.close(() => resolve())
  }))
  return {
    port: (proxy.address() as net.AddressInfo).port,
    get connections () { return pairs.size },
    freeze () {
      for (const { client, server } of pairs) {
        client.unpipe(server); server.unpipe(client)
        client.on('data', () => {}).resume(); server.on('data', () => {}).resume()
      }
      return pairs.size
    },
  }
}
