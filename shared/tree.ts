// Where the fleet's run-time files are (the SQL migrations, the tax compensation
// table, the deck's page, the lanes' job modules): the nearest folder, from this
// module upward, that holds shared/db/migrations. From source that is the repo;
// compiled, the output folder (dist/), wherever the bundler put this module's
// code in it (an entry file, or a shared chunk in dist/chunks/).
import fs from 'node:fs'
import path from 'node:path'

export const TREE = findUp(import.meta.dirname, 'shared/db/migrations')

/** The nearest folder, from `from` upward, that holds `entry`. */
export function findUp (from: string, entry: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, entry))) return dir
    if (path.dirname(dir) === dir) throw new Error(`no ${entry} above ${from}`)
  }
}

/** A file of the tree, e.g. `treePath('services/deck/public')`. */
export function treePath (...parts: string[]): string {
  return path.join(TREE, ...parts)
}
