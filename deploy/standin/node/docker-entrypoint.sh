#!/bin/sh
# As the official image's: `docker run node:22-bookworm-slim -e '...'` or
# `... app.js` runs node with those arguments; a command runs as it is.
set -e
if [ "${1#-}" != "$1" ] || [ -z "$(command -v "${1}")" ] || { [ -f "${1}" ] && ! [ -x "${1}" ]; }; then
  set -- node "$@"
fi
exec "$@"
