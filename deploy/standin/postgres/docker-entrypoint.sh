#!/bin/bash
# Entrypoint of the postgres:18 stand-in (../build-images.sh): the part of the
# official image's docker-entrypoint.sh that deploy/compose uses.
#   started as root: own the data and socket directories, then run again as
#     postgres (setpriv, from util-linux, is in Debian's minbase);
#   empty $PGDATA: initdb with superuser $POSTGRES_USER and its password
#     (scram-sha-256 over TCP from anywhere, trust on the local socket), then
#     create $POSTGRES_DB and run /docker-entrypoint-initdb.d/*.sql|*.sh on a
#     server listening on the socket only;
#   then exec postgres (PID 1, so SIGINT from `docker stop` is a fast shutdown).
set -Eeuo pipefail

# `docker run postgres:18 -c work_mem=64MB` runs postgres with those options.
if [[ ${1:-} == -* ]]; then set -- postgres "$@"; fi
if [[ ${1:-} != postgres ]]; then exec "$@"; fi

if [[ $(id -u) == 0 ]]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  find "$PGDATA" /var/run/postgresql \! -user postgres -exec chown postgres:postgres '{}' +
  chmod 00700 "$PGDATA"
  chmod 03777 /var/run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
  : "${POSTGRES_USER:=postgres}"
  : "${POSTGRES_DB:=$POSTGRES_USER}"
  auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
  if [[ -z ${POSTGRES_PASSWORD:-} && $auth != trust ]]; then
    echo 'error: database is uninitialized and POSTGRES_PASSWORD is not set' \
      '(or set POSTGRES_HOST_AUTH_METHOD=trust to allow connections without one)' >&2
    exit 1
  fi
  # The password through a pipe, never on a command line or in a file. The
  # <(...) belongs on initdb's own command: its descriptor lasts one command.
  # POSTGRES_INITDB_ARGS is a list of options, split on spaces as in the official image.
  args=(--username="$POSTGRES_USER" --auth-local=trust --auth-host="$auth")
  # shellcheck disable=SC2086
  if [[ -n ${POSTGRES_PASSWORD:-} ]]; then
    initdb "${args[@]}" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") ${POSTGRES_INITDB_ARGS:-}
  else
    initdb "${args[@]}" ${POSTGRES_INITDB_ARGS:-}
  fi
  # initdb's host lines name only the loopback addresses; compose's clients are other containers.
  printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
  # This build's socket default is /tmp (initdb writes that back into the
  # config, whatever the sample says); Debian's clients look in /var/run/postgresql.
  printf "\nunix_socket_directories = '/var/run/postgresql'\n" >>"$PGDATA/postgresql.conf"

  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --no-password)
  if [[ $POSTGRES_DB != postgres ]]; then
    "${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
  fi
  shopt -s nullglob
  for f in /docker-entrypoint-initdb.d/*; do
    case $f in
      *.sh) echo "running $f"; . "$f" ;;
      *.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
      *) echo "ignoring $f" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo 'PostgreSQL init process complete; ready for start up.'
fi

exec "$@"
