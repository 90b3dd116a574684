// A real OTLP/HTTP receiver for a test: a server on loopback that takes what
// the fleet's exporters POST to /v1/traces (OTLP's JSON encoding) and keeps
// every span, flattened, with the service that sent it. Closed at teardown.
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Test } from 'tap'

export interface ReceivedSpan {
  service: string
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number
  attributes: Record<string, string | number | boolean>
  links: Array<{ traceId: string, spanId: string, attributes: Record<string, string | number | boolean> }>
  /** 0 unset, 1 ok, 2 error. */
  status: number
}

export interface Receiver {
  url: string
  spans: ReceivedSpan[]
  /** POSTs received (each an export of a batch). */
  exports: number
  inTrace (traceId: string): ReceivedSpan[]
  /** From now on takes each export and never answers it: a collector that hangs. */
  hang (): void
  /** The services whose exports it holds unanswered now (each until its exporter gives up). */
  holding (): string[]
  /** Stops taking connections and cuts the open ones: the collector is down. */
  close (): Promise<void>
}

type OtlpValue = { stringValue?: string, intValue?: string | number, boolValue?: boolean, doubleValue?: number }
type OtlpAttrs = Array<{ key: string, value: OtlpValue }> | undefined

const value = (v: OtlpValue): string | number | boolean =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : v.boolValue ?? v.doubleValue ?? '')
const attrs = (a: OtlpAttrs): Record<string, string | number | boolean> =>
  Object.fromEntries((a ?? []).map(x => [x.key, value(x.value)]))

export async function startReceiver (t: Test): Promise<Receiver> {
  const spans: ReceivedSpan[] = []
  const sockets = new Set<Socket>()
  let exports = 0
  let hanging = false
  const held = new Map<http.IncomingMessage, string>()
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', c => chunks.push(c))
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') { res.writeHead(404).end(); return }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      if (hanging) {
        held.set(req, String(attrs(body.resourceSpans?.[0]?.resource?.attributes)['service.name'] ?? ''))
        res.once('close', () => held.delete(req))
        return
      }
      exports++
      for (const rs of body.resourceSpans ?? []) {
        const service = String(attrs(rs.resource?.attributes)['service.name'] ?? '')
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              service,
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId ?? '',
              name: s.name,
              kind: s.kind,
              attributes: attrs(s.attributes),
              links: (s.links ?? []).map((l: { traceId: string, spanId: string, attributes: OtlpAttrs }) => ({
                traceId: l.traceId, spanId: l.spanId, attributes: attrs(l.attributes),
              })),
              status: s.status?.code ?? 0,
            })
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  server.on('connection', s => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const close = async (): Promise<void> => {
    if (!server.listening) return
    const closed = new Promise<void>(resolve => server.close(() => resolve()))
    for (const s of sockets) s.destroy()
    await closed
  }
  t.teardown(close)
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    get exports () { return exports },
    inTrace: traceId => spans.filter(s => s.traceId === traceId),
    hang: () => { hanging = true },
    holding: () => [...held.values()],
    close,
  }
}
