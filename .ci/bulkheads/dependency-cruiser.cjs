// ADV-FD-01, the isolation gate: the import rules that keep each lane its own
// failure domain. `npm run lint:bulkheads` runs these with dependency-cruiser
// (and the module-level rules in eslint.config.js beside this file).
// Every rule name starts with the error code, so a failing gate says what it found.
const CODE = 'ERR_SHARED_FAILURE_DOMAIN_DETECTED'
const LANE = '(card-auth|fraud|tax)'

/* global module */
module.exports = {
  forbidden: [
    {
      name: `${CODE}:lane-imports-lane`,
      comment: 'A lane imports another lane: their code, and any state that code holds, would share a failure domain.',
      severity: 'error',
      from: { path: `^services/${LANE}/` },
      to: { path: `^services/${LANE}/`, pathNot: '^services/$1/' },
    },
    {
      name: `${CODE}:lane-imports-process`,
      comment: "A lane imports the gateway or another process's code (what they share, such as the job-type contract, lives in shared/).",
      severity: 'error',
      // The certification CLI may start a sandbox in-process when no provider is given; the lane never loads it.
      from: { path: `^services/${LANE}/`, pathNot: '^services/tax/compensation/certify-cli\\.ts$' },
      // Other lanes are the rule above's.
      to: { path: '^(gateway|services/(?!card-auth/|fraud/|tax/)[^/]+)/' },
    },
    {
      name: `${CODE}:process-imports-process`,
      comment: "The gateway, the supervisor, the deck or another process imports another process's code: what they share lives in shared/.",
      severity: 'error',
      from: { path: `^(gateway|services/(?!${LANE}/)[^/]+)/` },
      to: { path: '^(gateway|services/[^/]+)/', pathNot: '^$1/' },
    },
    {
      name: `${CODE}:shared-imports-process`,
      comment: 'shared/ is code every process loads; it must not pull in any one process.',
      severity: 'error',
      from: { path: '^shared/' },
      to: { path: '^(gateway|services)/' },
    },
    {
      name: `${CODE}:pool-outside-kit`,
      comment: 'A PostgreSQL pool or client made outside shared/db: the role, the limit share and the error handling would be its own.',
      severity: 'error',
      from: { pathNot: '^shared/db/' },
      to: { path: 'node_modules/(pg|pg-pool)/', dependencyTypesNot: ['type-only'] },
    },
    {
      name: `${CODE}:agent-outside-kit`,
      comment: "An HTTP agent made outside shared/lane-kit/http.ts, or undici's global dispatcher used (one for the whole process).",
      severity: 'error',
      from: { pathNot: '^shared/lane-kit/http\\.ts$' },
      to: { path: 'node_modules/undici/', dependencyTypesNot: ['type-only'] },
    },
    {
      name: `${CODE}:entry-imported`,
      comment: 'A process entry (main.ts, *-cli.ts) may hold module-level pools; importing it would share them.',
      severity: 'error',
      from: {},
      to: { path: '(^|/)(main|[a-z-]+-cli)\\.ts$' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    // See `import type` as type-only: a type costs nothing at run time.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    // node_modules is not followed, but stays visible as a dependency (the pg and undici rules need it).
    exclude: { path: '(^|/)(dist|test|\\.data)/' },
  },
}
