// ADV-FD-01, the part of the isolation gate that imports cannot show: no pool,
// client or HTTP agent held at module level, where every importer in the process
// would share it. Process entries (main.ts, *-cli.ts) are exempt: nothing may
// import them (dependency-cruiser.cjs, rule entry-imported).
import tseslint from 'typescript-eslint'

const CODE = 'ERR_SHARED_FAILURE_DOMAIN_DETECTED'
const MAKERS = '/^(Pool|Agent|Client|BalancedPool|ProxyAgent|Dispatcher)$/'
const FACTORIES = '/^(createLanePool|createRolePool|createClient|createHttpAgent|createOriginPool|createUpstreamPool)$/'
const made = [`NewExpression[callee.name=${MAKERS}]`, `NewExpression[callee.property.name=${MAKERS}]`, `CallExpression[callee.name=${FACTORIES}]`]
const selectors = made.flatMap(m => [
  // const pool = new pg.Pool(...) / export const agent = createHttpAgent(...) at module scope
  `Program > VariableDeclaration > VariableDeclarator > ${m}`,
  `Program > ExportNamedDeclaration > VariableDeclaration > VariableDeclarator > ${m}`,
  `Program > VariableDeclaration > VariableDeclarator > AwaitExpression > ${m}`,
  // provider ??= new Pool(...): a lazily made module-level pool is still one per process
  `AssignmentExpression[left.type="Identifier"] > ${m}`,
])

export default [
  {
    files: ['**/*.ts'],
    ignores: ['**/main.ts', '**/*-cli.ts', '**/node_modules/**', '**/dist/**'],
    languageOptions: { parser: tseslint.parser, sourceType: 'module' },
    // An eslint-disable comment cannot switch the gate off.
    linterOptions: { noInlineConfig: true, reportUnusedDisableDirectives: 'off' },
    rules: {
      'no-restricted-syntax': ['error', ...selectors.map(selector => ({
        selector,
        message: `${CODE}: a pool, client or HTTP agent at module level is shared by everything that imports this module; make it per app (inside a function) or in a process entry`,
      }))],
    },
  },
]
