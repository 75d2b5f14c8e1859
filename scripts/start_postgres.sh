#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1 for the trace-store tests (and for trying agora by hand).
#
# Usage:
#   scripts/start_postgres.sh [DIR]        start (or find running) the cluster kept in DIR (default /tmp/agora-pg);
#                                          prints its SQLAlchemy URL on stdout, everything else on stderr
#   scripts/start_postgres.sh stop [DIR]   stop it (the files stay; start again reuses them)
#
# Installs Debian's postgresql with apt-get when no initdb is found (needs root). The server runs as
# the 'postgres' user when started by root (PostgreSQL refuses to run as root), listens on 127.0.0.1
# only, on $AGORA_PG_PORT or the first free port from 54329 (remembered in DIR/port), and has a role
# 'agora' (password 'agora', may create databases) owning a database 'agora'.
# Idempotent: a second start prints the same URL. Exit codes: 0 ok, 1 failure, 3 PostgreSQL is
# absent and cannot be installed here (no apt-get, or not root).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"  # apt_get, apt_install, require_installer

log() { echo "start_postgres: $*" >&2; }

ACTION=start
if [ "${1:-}" = "stop" ] || [ "${1:-}" = "start" ]; then
  ACTION="$1"
  shift
fi
DIR="${1:-/tmp/agora-pg}"
DATA="$DIR/data"
USER_NAME=agora
PASSWORD=agora
DATABASE=agora

find_bin() {
  local found
  for found in /usr/lib/postgresql/*/bin; do
    [ -x "$found/initdb" ] && { echo "$found"; return 0; }
  done
  found="$(command -v initdb 2>/dev/null || true)"
  [ -n "$found" ] && { dirname "$found"; return 0; }
  return 1
}

as_owner() {  # run a PostgreSQL binary as the cluster's owner
  if [ "$(id -u)" != 0 ]; then
    "$@"
  elif command -v runuser >/dev/null 2>&1; then
    runuser -u postgres -- "$@"
  else
    su postgres -s /bin/sh -c '"$0" "$@"' -- "$@"
  fi
}

install_postgres() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "PostgreSQL is not installed and cannot be installed here (needs root and apt-get)"
    exit 3
  fi
  local apt_log="${TMPDIR:-/tmp}/agora-install-postgres.log"
  log "installing Debian's postgresql with apt-get (takes a minute; log: $apt_log)"
  apt_install "$apt_log" postgresql || { log "apt-get install postgresql failed (log: $apt_log)"; exit 1; }
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

running() { [ -f "$DATA/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

BIN="$(find_bin || true)"

if [ "$ACTION" = stop ]; then
  if [ -n "$BIN" ] && [ -d "$DATA" ] && running; then
    as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2
  else
    log "no server running in $DATA"
  fi
  exit 0
fi

if [ -z "$BIN" ]; then
  install_postgres
  BIN="$(find_bin)" || { log "postgresql installed but no initdb found"; exit 1; }
fi

mkdir -p "$DIR"
chmod 755 "$DIR"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR"

# One start at a time per DIR: concurrent test sessions reuse the same server.
exec 9>"$DIR/.lock"
flock 9

if [ ! -f "$DATA/PG_VERSION" ]; then
  log "initialising a cluster in $DATA"
  as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; exit 1; }
fi

if [ -f "$DIR/port" ]; then
  PORT="$(cat "$DIR/port")"
else
  PORT="${AGORA_PG_PORT:-54329}"
  while port_busy "$PORT"; do PORT=$((PORT + 1)); done
  echo "$PORT" | as_owner tee "$DIR/port" >/dev/null
fi

if ! running; then
  if port_busy "$PORT"; then
    log "port $PORT on 127.0.0.1 is taken by another program; remove $DIR/port or set AGORA_PG_PORT"
    exit 1
  fi
  log "starting PostgreSQL on 127.0.0.1:$PORT"
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c max_connections=100" start >&2 9>&- \
    || { tail -n 20 "$DIR/server.log" >&2; exit 1; }
fi

psql_admin() { as_owner "$BIN/psql" -h "$DIR" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"; }

if [ "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$USER_NAME'")" != 1 ]; then
  psql_admin -c "CREATE ROLE $USER_NAME LOGIN CREATEDB PASSWORD '$PASSWORD'" >&2
fi
if [ "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" != 1 ]; then
  psql_admin -c "CREATE DATABASE $DATABASE OWNER $USER_NAME" >&2
fi

echo "postgresql+psycopg://$USER_NAME:$PASSWORD@127.0.0.1:$PORT/$DATABASE"
