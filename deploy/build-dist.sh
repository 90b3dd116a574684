#!/bin/sh
# Compile the fleet to JavaScript in dist/ (or $1) and copy what the compiled
# code reads at run time: the SQL migrations, the tax compensation table and the
# deck's page. Used by deploy/Dockerfile, by test/container-build.test.ts, and
# by `npm start` and the tests (with TSC_FLAGS=--noCheck: the same JavaScript,
# without type checking, in about 4 s; `npm run typecheck` checks the types).
# TSCONFIG=deploy/tsconfig.local.json compiles the supervisor too (npm start).
set -eu
out="${1:-dist}"
cd "$(dirname "$0")/.."
rm -rf "$out"
# shellcheck disable=SC2086
npx tsc -p "${TSCONFIG:-deploy/tsconfig.build.json}" --outDir "$out" ${TSC_FLAGS:-}
mkdir -p "$out/shared/db/migrations" "$out/services/deck/public"
cp shared/db/migrations/*.sql "$out/shared/db/migrations/"
cp services/tax/compensation/rates-table.json "$out/services/tax/compensation/"
cp services/deck/public/* "$out/services/deck/public/"
