// The page's files: a fixed table loaded once at boot, so no request path ever
// reaches the filesystem. They are OPEN (no token): the page holds no data and
// asks for the token itself. uPlot (a small, well-kept time-series chart) is
// served from its npm package.
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import { treePath } from '../../shared/tree.ts'
import { OPEN } from './admin-auth.ts'

const here = treePath('services/deck/public')
const uplot = path.dirname(createRequire(import.meta.url).resolve('uplot/dist/uPlot.iife.min.js'))

const FILES: Record<string, { file: string, type: string }> = {
  '/': { file: path.join(here, 'index.html'), type: 'text/html; charset=utf-8' },
  '/deck.js': { file: path.join(here, 'deck.js'), type: 'text/javascript; charset=utf-8' },
  '/deck.css': { file: path.join(here, 'deck.css'), type: 'text/css; charset=utf-8' },
  '/vendor/uplot.js': { file: path.join(uplot, 'uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8' },
  '/vendor/uplot.css': { file: path.join(uplot, 'uPlot.min.css'), type: 'text/css; charset=utf-8' },
}

// Scripts and styles from this origin only; the page talks to this origin only.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

export function registerPage (app: FastifyInstance): void {
  for (const [route, { file, type }] of Object.entries(FILES)) {
    const body = fs.readFileSync(file)
    app.get(route, { config: OPEN }, async (_req, reply) => reply.type(type).header('cache-control', 'no-cache').send(body))
  }
  app.addHook('onSend', async (_req, reply) => {
    reply.header('content-security-policy', CSP)
    reply.header('x-content-type-options', 'nosniff')
    reply.header('referrer-policy', 'no-referrer')
    reply.header('x-frame-options', 'DENY')
  })
}
