#!/usr/bin/env bash
# A Compose client that can validate docker/compose.yaml (`config`), for tests/deploy: the Docker
# Compose v2 plugin (`docker compose`) when it is there, else Debian's `docker-compose` 1.29.2,
# installed with apt-get. Neither needs a Docker engine to validate a compose file.
#
# Usage: scripts/install_compose.sh     install docker-compose with apt-get when neither client
#                                       answers (idempotent); prints the command to use on stdout:
#                                       "docker compose" or the path of docker-compose
#
# Needs root (or passwordless sudo) to install. Exit codes: 0 a client is there (its command on
# stdout), 1 the install failed, 3 no client and none can be installed here (no apt-get, or not
# root and no sudo).
# Timings on this 2-core VM: cold (apt-get install) about 25 s; already there 1 s.
set -euo pipefail
# Every installer of the tests goes through one lock (two pytest workers may install at once).
apt_get() { flock /tmp/agora-apt.lock apt-get -o DPkg::Lock::Timeout=600 "$@"; }

LOG="${TMPDIR:-/tmp}/agora-install-compose.log"

say() { echo "install_compose: $*" >&2; }

found() {  # print the working client's command and succeed, or fail
  if command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
    echo "docker compose"
    return 0
  fi
  if command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; then
    command -v docker-compose
    return 0
  fi
  return 1
}

if found; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  say "neither 'docker compose' nor 'docker-compose' answers, and there is no apt-get to install docker-compose"
  exit 3
fi
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    exec sudo -n -E bash "$0" "$@"
  fi
  say "neither 'docker compose' nor 'docker-compose' answers; installing docker-compose needs root (or passwordless sudo)"
  exit 3
fi

install() {
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends docker-compose \
    >>"$LOG" 2>&1
}

say "installing Debian's docker-compose (apt-get; log: $LOG)"
if ! install; then
  apt_get update -qq >>"$LOG" 2>&1 || true
  install || { tail -20 "$LOG" >&2; say "apt-get install docker-compose failed (log: $LOG)"; exit 1; }
fi
if ! found; then
  say "apt-get installed docker-compose but 'docker-compose version' fails"
  docker-compose version >&2 || true
  exit 1
fi
