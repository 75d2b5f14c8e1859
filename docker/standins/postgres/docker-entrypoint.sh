#!/usr/bin/env bash
# The stand-in's entrypoint (see Dockerfile), the subset of the official postgres image's that
# docker/compose.yaml uses. `postgres ARGS...`: the superuser's password is $POSTGRES_PASSWORD, or the
# content of the file $POSTGRES_PASSWORD_FILE names (read here, as root, before anything drops to user
# postgres; giving both is an error, as in the official image), exported as POSTGRES_PASSWORD; on an
# empty $PGDATA, initdb with superuser $POSTGRES_USER (default postgres) and that password (required),
# local connections trusted, every other one by scram-sha-256; then a server on the socket only runs
# each /docker-entrypoint-initdb.d/*.sh (executed when executable, else sourced) and *.sql once, as
# user postgres (as the official image does, after it drops to that user), and stops; then the server
# runs in the foreground on every address, as user postgres. Anything else runs as given.
set -euo pipefail

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
shift
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    echo "docker-entrypoint: error: both POSTGRES_PASSWORD and POSTGRES_PASSWORD_FILE are set (but are exclusive)" >&2
    exit 1
  fi
  POSTGRES_PASSWORD="$(<"$POSTGRES_PASSWORD_FILE")"
  export POSTGRES_PASSWORD
  unset POSTGRES_PASSWORD_FILE
fi
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE (the password of the superuser)}"
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
          as_postgres "$f"
        else
          echo "docker-entrypoint: sourcing $f"
          as_postgres bash -c '. "$1"' sourced "$f"
        fi
        ;;
      *.sql)
        echo "docker-entrypoint: running $f"
        as_postgres psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --dbname postgres -f "$f"
        ;;
      *) [ ! -e "$f" ] || echo "docker-entrypoint: ignoring $f" ;;
    esac
  done
  as_postgres pg_ctl -D "$PGDATA" -m fast -w stop
  echo "docker-entrypoint: initialised $PGDATA"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups -- postgres -c listen_addresses='*' "$@"
