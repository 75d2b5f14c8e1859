#!/usr/bin/env bash
# The stand-in's entrypoint (see Dockerfile), the subset of the official postgres image's that
# docker/compose.yaml uses. `postgres ARGS...`: on an empty $PGDATA, initdb with superuser
# $POSTGRES_USER (default postgres) and password $POSTGRES_PASSWORD (required), local connections
# trusted, every other one by scram-sha-256; then a server on the socket only runs each
# /docker-entrypoint-initdb.d/*.sh (executed when executable, else sourced) and *.sql once, and
# stops; then the server runs in the foreground on every address, as user postgres. Anything else
# runs as given.
set -euo pipefail

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
shift
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (the password of the superuser)}"
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_postgres initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 -D "$PGDATA"
  rm -f "$pwfile"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh)
        if [ -x "$f" ]; then
          echo "docker-entrypoint: running $f"
          "$f"
        else
          echo "docker-entrypoint: sourcing $f"
          # shellcheck disable=SC1090
          . "$f"
        fi
        ;;
      *.sql)
        echo "docker-entrypoint: running $f"
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --dbname postgres -f "$f"
        ;;
      *) [ ! -e "$f" ] || echo "docker-entrypoint: ignoring $f" ;;
    esac
  done
  as_postgres pg_ctl -D "$PGDATA" -m fast -w stop
  echo "docker-entrypoint: initialised $PGDATA"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups -- postgres -c listen_addresses='*' "$@"
