// ESLint (flat config): neostandard (the fastify family's style, TypeScript
// mode) plus the recommended rule sets of ESLint and typescript-eslint, which
// neostandard's TS mode does not include, and a line-length limit.
import js from '@eslint/js'
import globals from 'globals'
import neostandard from 'neostandard'
import tseslint from 'typescript-eslint'

// Code lines only: URLs, strings, template literals and regular expressions may
// run past it (a message or a pattern is easier to find whole).
const LIMIT = 120
const ignores = ['node_modules/', 'dist/', '.data/', 'coverage/', '.tap/', 'test-artifacts/', 'test/fixtures/']

export default [
  js.configs.recommended,
  ...tseslint.configs.recommended,
  // After the recommended sets, so that its options win and its TS config
  // switches off the core rules TypeScript already checks.
  ...neostandard({ ts: true, noJsx: true, ignores }),
  {
    languageOptions: { ecmaVersion: 'latest' },
    rules: {
      // The TS rule, with the project's options, checks every file (as
      // typescript-eslint's recommended set had it); the core one would double it.
      'no-unused-vars': 'off',
      'no-var': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
      'no-control-regex': 'off',
      // `void promise;` marks a promise left to run on its own on purpose.
      'no-void': ['error', { allowAsStatement: true }],
      // prom-client's metrics register themselves when made: `new client.Gauge({ registers })` is the idiom.
      'no-new': 'off',
      // The loops it flags wait on a flag that another async task sets; the rule cannot see it.
      'no-unmodified-loop-condition': 'off',
      '@stylistic/max-len': ['error', {
        code: LIMIT,
        ignoreUrls: true,
        ignoreStrings: true,
        ignoreTemplateLiterals: true,
        ignoreRegExpLiterals: true,
      }],
    },
  },
  {
    // TypeScript reports real redeclarations (ts 2451); a TypeBox schema and its type share a name.
    files: ['**/*.ts'],
    rules: { '@typescript-eslint/no-redeclare': 'off' },
  },
  {
    // In plain JS the core rules, with neostandard's options, already check these.
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    rules: { '@typescript-eslint/no-unused-expressions': 'off', '@typescript-eslint/no-array-constructor': 'off' },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
  },
  {
    // The deck's page runs in the browser, as ES modules served as they are.
    files: ['services/deck/public/**/*.js'],
    languageOptions: { sourceType: 'module', globals: { ...globals.browser } },
  },
]
