// GET /…/:id for a lane resource: the stored response of one of the calling
// client's own records (another client's id is a 404, not a 403: ids leak nothing).
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { IdParams } from '../api-schemas.ts'
import { AppError } from '../errors.ts'
import type { LaneKit } from './build-lane-app.ts'
import type { RejectHandler } from './admission.ts'
import { clientIdOf } from './request-context.ts'

export function storedResponseRoute (
  app: FastifyInstance, kit: LaneKit, opts: { url: string, table: string, what: string, onReject: RejectHandler }
): void {
  if (!/^[a-z_]+\.[a-z_]+$/.test(opts.table)) throw new Error(`bad table ${opts.table}`)
  const sql = `select response from ${opts.table} where id = $1 and client_id = $2`
  app.get(opts.url, { schema: { params: IdParams } }, kit.admitted(async (req: FastifyRequest, exec) => {
    const { id } = req.params as { id: string }
    const { rows } = await exec.db.query<{ response: unknown }>(sql, [id, clientIdOf(req)])
    if (!rows[0]) throw new AppError('ERR_NOT_FOUND', { detail: `no ${opts.what} ${id}` })
    return { status: 200, body: rows[0].response }
  }, opts.onReject))
}
