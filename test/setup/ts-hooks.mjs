// Module hooks that let the test processes import the project's TypeScript as
// it is: each `.ts` file is compiled alone by esbuild (types stripped, line
// structure kept) with an inline source map, so V8's coverage maps back to the
// right lines. Used by tap for every test file (package.json `tap.node-arg`).
import { readFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { transform } from 'esbuild'

// The project's compiler options; esbuild takes those that change how a file
// compiles alone (verbatimModuleSyntax, target) and ignores the rest.
const tsconfigRaw = JSON.parse(readFileSync(new URL('../../tsconfig.json', import.meta.url), 'utf8'))

export async function load (url, context, nextLoad) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return nextLoad(url, context)
  const file = fileURLToPath(url)
  const { code } = await transform(await readFile(file, 'utf8'), { loader: 'ts', format: 'esm', target: 'node20', sourcemap: 'inline', sourcesContent: true, sourcefile: file, tsconfigRaw })
  return { format: 'module', source: code, shortCircuit: true }
}
