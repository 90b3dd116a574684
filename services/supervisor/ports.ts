// Before the fleet starts: every port it is about to listen on must be free. A
// port still held (most often by a process of an earlier run that outlived it)
// is named with its holder and what to do, instead of a child that fails to
// listen and is restarted over and over.
import fs from 'node:fs'
import net from 'node:net'

export interface PortUse { name: string, host: string, port: number }
export interface PortConflict extends PortUse { pid: number | undefined, command: string | undefined }

function canListen (host: string, port: number): Promise<boolean> {
  return new Promise(resolve => {
    const s = net.createServer()
    s.once('error', () => resolve(false))
    s.listen({ host, port, exclusive: true }, () => s.close(() => resolve(true)))
  })
}

/**
 * The pid and command line holding a listening TCP port, from /proc (Linux);
 * undefined elsewhere or when not visible.
 */
export function portHolder (port: number): { pid: number, command: string } | undefined {
  const inodes = new Set<string>()
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = ''
    try { text = fs.readFileSync(file, 'utf8') } catch { continue }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/)
      // local_address is HEXIP:HEXPORT; state 0A is LISTEN; inode is the 10th field.
      if (f.length > 9 && f[3] === '0A' && parseInt(f[1]!.split(':')[1]!, 16) === port) inodes.add(f[9]!)
    }
  }
  if (inodes.size === 0) return undefined
  for (const pid of fs.readdirSync('/proc').filter(d => /^\d+$/.test(d))) {
    let fds: string[] = []
    try { fds = fs.readdirSync(`/proc/${pid}/fd`) } catch { continue }
    for (const fd of fds) {
      let target = ''
      try { target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`) } catch { continue }
      const m = /^socket:\[(\d+)\]$/.exec(target)
      if (m && inodes.has(m[1]!)) {
        let command = ''
        try { command = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ') } catch { /* gone */ }
        return { pid: Number(pid), command }
      }
    }
  }
  return undefined
}

export async function portConflicts (uses: PortUse[]): Promise<PortConflict[]> {
  const out: PortConflict[] = []
  for (const u of uses) {
    if (await canListen(u.host, u.port)) continue
    const h = portHolder(u.port)
    out.push({ ...u, pid: h?.pid, command: h?.command })
  }
  return out
}

export function describeConflicts (c: PortConflict[]): string {
  const lines = c.map(x => `  port ${x.port} (${x.name}) is in use${x.pid ? ` by pid ${x.pid}: ${x.command}` : ' (holder not visible)'}`)
  const pids = [...new Set(c.map(x => x.pid).filter(Boolean))]
  return [
    'the fleet cannot start: its ports are taken',
    ...lines,
    pids.length > 0
      ? `  most likely processes left by an earlier run: stop them (kill ${pids.join(' ')}; kill -9 if they do not exit) and start again, or give this run other ports (GATEWAY_PORT, CARD_AUTH_PORT, ... docs/operations.md, "Configuration").`
      : '  stop whatever holds them, or give this run other ports (GATEWAY_PORT, CARD_AUTH_PORT, ... docs/operations.md, "Configuration").',
  ].join('\n')
}
