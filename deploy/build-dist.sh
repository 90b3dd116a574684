#!/bin/sh
# Build the fleet into dist/ (or $1): bundle it to JavaScript (deploy/bundle.mjs,
# esbuild, about 1 s) and copy what it reads at run time: the SQL migrations, the
# tax compensation table and the deck's page (its folders too: the page's script
# is ES modules in public/deck/). Used by deploy/Dockerfile, by
# test/container-build.test.ts, and by `npm start` and the tests. No type check
# here: `npm run typecheck` checks the types (CI runs it).
# --with-supervisor bundles the supervisor too (npm start); the image has none.
# BUNDLE_META=<file> writes esbuild's metafile there (what each output holds and loads).
set -eu
out="${1:-dist}"
cd "$(dirname "$0")/.."
rm -rf "$out"
node deploy/bundle.mjs "$out" ${2:-}
mkdir -p "$out/shared/db/migrations" "$out/services/deck/public" "$out/services/tax/compensation"
cp shared/db/migrations/*.sql "$out/shared/db/migrations/"
cp services/tax/compensation/rates-table.json "$out/services/tax/compensation/"
cp -R services/deck/public/. "$out/services/deck/public/"
