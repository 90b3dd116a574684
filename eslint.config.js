// ESLint (flat config) with typescript-eslint's recommended rules.
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['node_modules/', 'dist/', '.data/', 'coverage/', '.tap/', 'test-artifacts/', 'test/fixtures/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', setInterval: 'readonly', clearInterval: 'readonly', URL: 'readonly', Buffer: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly', performance: 'readonly', fetch: 'readonly', NodeJS: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
      'no-control-regex': 'off',
    },
  },
  {
    // The deck's page runs in the browser, as ES modules served as they are.
    files: ['services/deck/public/**/*.js'],
    languageOptions: { sourceType: 'module', globals: { window: 'readonly', document: 'readonly', sessionStorage: 'readonly', fetch: 'readonly', CSS: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', setInterval: 'readonly' } },
  },
)
