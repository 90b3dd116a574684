#!/bin/sh
# Compile the fleet to JavaScript in dist/ (or $1) and copy what the compiled
# code reads at run time: the SQL migrations, the tax compensation table and the
# deck's page. Used by deploy/Dockerfile and by test/container-build.test.ts.
set -eu
out="${1:-dist}"
cd "$(dirname "$0")/.."
rm -rf "$out"
npx tsc -p deploy/tsconfig.build.json --outDir "$out"
mkdir -p "$out/shared/db/migrations" "$out/services/deck/public"
cp shared/db/migrations/*.sql "$out/shared/db/migrations/"
cp services/tax/compensation/rates-table.json "$out/services/tax/compensation/"
cp services/deck/public/* "$out/services/deck/public/"
