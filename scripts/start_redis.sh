#!/usr/bin/env bash
# A throwaway Redis server on 127.0.0.1: the Celery broker of the Celery-pool tests (and for trying
# agora's celery backend by hand).
#
# Usage:
#   scripts/start_redis.sh [DIR]        start (or find running) the server kept in DIR (default /tmp/agora-redis);
#                                       prints its URL (redis://127.0.0.1:PORT/0) on stdout, everything else on stderr
#   scripts/start_redis.sh stop [DIR]   stop it (the directory stays; start again reuses its port)
#
# Installs Debian's redis-server with apt-get when none is found (needs root, or passwordless sudo).
# The server listens on 127.0.0.1 only (protected mode on), on $AGORA_REDIS_PORT or the first free
# port from 63790 (remembered in DIR/port), keeps nothing on disk (no RDB snapshots, no AOF), and
# writes its pid to DIR/redis.pid and its log to DIR/server.log, with DIR as its working directory.
# Idempotent: a second start prints the same URL. Exit codes: 0 ok, 1 failure, 3 Redis is absent and
# cannot be installed here (no apt-get, or not root).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"  # apt_get, apt_install, require_installer

log() { echo "start_redis: $*" >&2; }

ACTION=start
if [ "${1:-}" = "stop" ] || [ "${1:-}" = "start" ]; then
  ACTION="$1"
  shift
fi
DIR="${1:-/tmp/agora-redis}"
PIDFILE="$DIR/redis.pid"

alive() { [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

answers() {  # answers PORT: the server on PORT replies +PONG to PING (no redis-cli needed)
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
  printf 'PING\r\n' >&3
  IFS= read -r -t 2 reply <&3 || reply=""
  exec 3>&-
  [ "${reply%$'\r'}" = "+PONG" ]
}

if [ "$ACTION" = stop ]; then
  if alive; then
    pid="$(cat "$PIDFILE")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then
      log "redis-server $pid did not stop on SIGTERM within 10 s; SIGKILL"
      kill -9 "$pid" 2>/dev/null || true
    fi
  else
    log "no server running in $DIR"
  fi
  rm -f "$PIDFILE"
  exit 0
fi

if ! command -v redis-server >/dev/null 2>&1; then
  require_installer "redis-server is not installed" "$0" "$ACTION" "$DIR"
  apt_log="${TMPDIR:-/tmp}/agora-install-redis.log"
  log "installing Debian's redis-server with apt-get (log: $apt_log)"
  apt_install "$apt_log" redis-server || { log "apt-get install redis-server failed (log: $apt_log)"; exit 1; }
  # Debian's package starts a server of its own on 6379 where an init system runs: ours is separate.
fi

mkdir -p "$DIR"
# One start at a time per DIR: concurrent callers reuse the same server.
exec 9>"$DIR/.lock"
flock 9

if [ -f "$DIR/port" ]; then
  PORT="$(cat "$DIR/port")"
else
  PORT="${AGORA_REDIS_PORT:-63790}"
  while port_busy "$PORT"; do PORT=$((PORT + 1)); done
  echo "$PORT" >"$DIR/port"
fi

if ! alive; then
  if port_busy "$PORT"; then
    log "port $PORT on 127.0.0.1 is taken by another program; remove $DIR/port or set AGORA_REDIS_PORT"
    exit 1
  fi
  log "starting redis-server on 127.0.0.1:$PORT"
  redis-server --bind 127.0.0.1 --port "$PORT" --protected-mode yes --daemonize yes \
    --pidfile "$PIDFILE" --logfile "$DIR/server.log" --dir "$DIR" --save "" --appendonly no 9>&- \
    || { tail -n 20 "$DIR/server.log" >&2 2>/dev/null; exit 1; }
fi

for _ in $(seq 100); do
  answers "$PORT" && break
  sleep 0.1
done
answers "$PORT" || { log "redis-server on port $PORT does not answer PING"; tail -n 20 "$DIR/server.log" >&2; exit 1; }

echo "redis://127.0.0.1:$PORT/0"
