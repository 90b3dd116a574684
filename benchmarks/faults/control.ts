// The benchmark's side of the tax faults: compile the preload (plain JavaScript,
// so the fleet's compiled children load it without a TypeScript loader), the
// node flags that attach it to the process running tax code, and the switch.
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import ts from 'typescript'
import { FAULT_DEFAULTS, FAULT_FILE_ENV, type CodeFault, type FaultControl } from './spec.ts'

/** Compiles preload.ts to `<dir>/fault-preload.mjs`; returns its path. */
export function compilePreload (dir: string): string {
  const src = fs.readFileSync(path.join(import.meta.dirname, 'preload.ts'), 'utf8')
  const out = ts.transpileModule(src, {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  })
  fs.mkdirSync(dir, { recursive: true })
  const file = path.join(dir, 'fault-preload.mjs')
  fs.writeFileSync(file, out.outputText)
  return file
}

/** node flags for the process that runs tax code: its heap limit and the preload. */
export function taxNodeArgs (preload: string, heapMb: number): string[] {
  return [`--max-old-space-size=${heapMb}`, `--import=${pathToFileURL(preload).href}`]
}

/** The control file the preload polls. Written whole (rename), so a poll never reads half of it. */
export class FaultSwitch {
  readonly file: string
  readonly params: Omit<FaultControl, 'fault' | 'since'>
  constructor (file: string, params: Partial<Omit<FaultControl, 'fault' | 'since'>> = {}) {
    this.file = file
    this.params = { ...FAULT_DEFAULTS, ...params }
    this.set('none')
  }

  /** env for the process(es) started with the preload. */
  get env (): Record<string, string> { return { [FAULT_FILE_ENV]: this.file } }

  #text = ''

  set (fault: CodeFault | 'none'): void {
    const c: FaultControl = { fault, since: Date.now(), ...this.params }
    this.#text = JSON.stringify(c)
    fs.writeFileSync(`${this.file}.tmp`, this.#text)
    fs.renameSync(`${this.file}.tmp`, this.file)
  }

  /** Whether the process `pid` has applied the last `set` (the preload's acknowledgement). */
  seenBy (pid: number): boolean {
    try { return fs.readFileSync(`${this.file}.seen-${pid}`, 'utf8') === this.#text } catch { return false }
  }
}
