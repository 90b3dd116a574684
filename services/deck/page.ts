// The page's files: a fixed table loaded once at boot, so no request path ever
// reaches the filesystem. They are OPEN (no token): the page holds no data and
// asks for the token itself. Its script is ES modules served as they are (no
// build step): every .js in public/deck/ at /deck/<name>, listed at boot, so a
// new module needs no entry here. uPlot (a small, well-kept time-series chart)
// is served from its npm package.
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import { treePath } from '../../shared/tree.ts'
import { OPEN } from './admin-auth.ts'

const here = treePath('services/deck/public')
const uplot = path.dirname(createRequire(import.meta.url).resolve('uplot/dist/uPlot.iife.min.js'))

// A module script must come with a JavaScript type: the browser refuses any other.
const JS = 'text/javascript; charset=utf-8'
const modules = fs.readdirSync(path.join(here, 'deck')).filter(f => f.endsWith('.js'))

const FILES: Record<string, { file: string, type: string }> = {
  '/': { file: path.join(here, 'index.html'), type: 'text/html; charset=utf-8' },
  ...Object.fromEntries(modules.map(f => [`/deck/${f}`, { file: path.join(here, 'deck', f), type: JS }])),
  '/deck.css': { file: path.join(here, 'deck.css'), type: 'text/css; charset=utf-8' },
  '/vendor/uplot.js': { file: path.join(uplot, 'uPlot.iife.min.js'), type: JS },
  '/vendor/uplot.css': { file: path.join(uplot, 'uPlot.min.css'), type: 'text/css; charset=utf-8' },
}

// Scripts (the modules too) and styles from this origin only; the page talks to this origin only.
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
