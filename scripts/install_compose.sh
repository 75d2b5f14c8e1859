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
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"  # apt_get, apt_install, require_installer

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
require_installer "install_compose: neither 'docker compose' nor 'docker-compose' answers" "$0" "$@"

say "installing Debian's docker-compose (apt-get; log: $LOG)"
apt_install "$LOG" docker-compose || { say "apt-get install docker-compose failed (log: $LOG)"; exit 1; }
if ! found; then
  say "apt-get installed docker-compose but 'docker-compose version' fails"
  docker-compose version >&2 || true
  exit 1
fi
