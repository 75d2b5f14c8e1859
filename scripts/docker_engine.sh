#!/usr/bin/env bash
# A Docker engine of its own for docker/compose.yaml, on a Debian machine with no engine and no
# registry (only Debian's mirror and PyPI reachable), as the tests/deploy/test_stack.py end-to-end
# test and a developer use it. Everything lives under DIR (default $AGORA_DOCKER_DIR, else
# /var/tmp/agora-docker): the daemon's socket, pid file, log, data root and exec root, so nothing
# collides with a system daemon.
#
#   scripts/docker_engine.sh start [DIR]   install Debian's docker.io, debootstrap and docker-compose
#                                          when missing (apt-get, as root); start dockerd unless the
#                                          one of DIR runs; make the base images that are absent and
#                                          cannot be pulled (below); print the environment to use
#   scripts/docker_engine.sh build [DIR]   build docker/Dockerfile as $AGORA_IMAGE (agora-airflow:latest)
#                                          with the host's network (apt and pip inside the build)
#   scripts/docker_engine.sh env [DIR]     print the environment to use (no side effects)
#   scripts/docker_engine.sh status [DIR]  exit 0 if the daemon of DIR runs and answers, else 1
#   scripts/docker_engine.sh stop [DIR]    stop the daemon that start started (by its pid file only;
#                                          its containers stop with it); --purge as a last argument
#                                          also deletes DIR (images, volumes)
#
# The environment, printed on stdout as `export NAME=VALUE` lines (eval "$(... start)"):
# DOCKER_HOST (the daemon's socket), and POSTGRES_IMAGE / REDIS_IMAGE when the stand-ins are used.
#
# Base images, each made only when absent and `docker pull` fails (no registry):
# - docker/Dockerfile's FROM (python:3.11-slim-bookworm): Debian's own Python 3.11 on a debootstrap
#   bookworm (docker/standins/python), under the Dockerfile's name, so that the Dockerfile stays
#   the one a user builds against a registry; the same Python version, not the same image;
# - agora-standin/postgres:15 and agora-standin/redis:7 (docker/standins/postgres, redis): Debian's
#   PostgreSQL 15 and Redis 7.0 with an entrypoint that implements the part of the official images'
#   contract compose.yaml uses. Named as what they are, and selected through POSTGRES_IMAGE and
#   REDIS_IMAGE (the official postgres:16-bookworm and redis:7-bookworm cannot be made here).
# All three start from agora-standin/debian:bookworm, `debootstrap --variant=minbase bookworm` from
# the mirror apt's own sources name, imported with `docker import`.
#
# Storage driver: $AGORA_DOCKER_STORAGE_DRIVER, else overlay2 where the kernel has overlayfs (vfs,
# which copies every layer in full, when dockerd refuses it). No iptables (--iptables=false): the
# containers reach each other on their compose network's bridge, nothing outside. No default bridge
# (--bridge=none): docker0 stays a system daemon's; builds use the host's network.
# Exit codes: 0 done; 1 a step failed (the log named); 3 cannot install here (not root, no apt-get).
# Timings on this 2-core VM: see docs/deployment.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/apt.sh"  # apt_install, require_installer

ACTION="${1:-}"
PURGE=false
[ "${*: -1}" != --purge ] || { PURGE=true; set -- "${@:1:$#-1}"; }
DIR="${2:-${AGORA_DOCKER_DIR:-/var/tmp/agora-docker}}"
SOCK="$DIR/docker.sock"
PIDFILE="$DIR/docker.pid"
LOG="$DIR/dockerd.log"
DEBIAN_BASE=agora-standin/debian:bookworm
POSTGRES_STANDIN=agora-standin/postgres:15
REDIS_STANDIN=agora-standin/redis:7
AGORA_IMAGE="${AGORA_IMAGE:-agora-airflow:latest}"
export DOCKER_HOST="unix://$SOCK"
export DOCKER_BUILDKIT=0  # the classic builder: BuildKit would pull its frontend (no registry) and needs buildx

say() { echo "docker_engine: $*" >&2; }
die() { say "error: $*"; exit 1; }

running() {  # whether the daemon of DIR runs and answers
  [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && docker version >/dev/null 2>&1
}

install_missing() {
  local packages=()
  command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || packages+=(debootstrap)
  if [ "${#packages[@]}" -gt 0 ]; then
    require_installer "docker_engine: ${packages[*]} missing" "$0" "$@"
    say "installing ${packages[*]} (apt-get; log: $DIR/apt.log)"
    apt_install "$DIR/apt.log" "${packages[@]}" || die "apt-get install ${packages[*]} failed (log: $DIR/apt.log)"
  fi
  bash "$ROOT/scripts/install_compose.sh" >/dev/null
}

start_daemon() {  # start_daemon DRIVER: dockerd in the background, wait until it answers
  local driver="$1" pid
  mkdir -p "$DIR/root" "$DIR/exec"
  say "starting dockerd ($driver; log: $LOG)"
  setsid dockerd --iptables=false --bridge=none --storage-driver="$driver" --data-root "$DIR/root" --exec-root "$DIR/exec" \
    -H "$DOCKER_HOST" --pidfile "$PIDFILE" </dev/null >>"$LOG" 2>&1 &
  pid=$!
  for _ in $(seq 60); do
    docker version >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 1
  done
  kill "$pid" 2>/dev/null || true
  return 1
}

dockerfile_base() { sed -n 's/^FROM[[:space:]]\{1,\}\([^[:space:]]\{1,\}\).*/\1/p' "$ROOT/docker/Dockerfile" | head -1; }

have() { docker image inspect "$1" >/dev/null 2>&1; }

pulled() {  # try the registry once (quick to fail where there is none)
  [ "${AGORA_DOCKER_PULL:-1}" = 1 ] || return 1
  timeout "${AGORA_DOCKER_PULL_TIMEOUT_S:-60}" docker pull -q "$1" >>"$DIR/pull.log" 2>&1
}

apt_mirror() {  # the Debian mirror apt's own sources name
  local mirror=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    mirror="$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/\{0,1\}$/\1/p' /etc/apt/sources.list.d/debian.sources | head -1)"
  fi
  if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror="$(sed -n 's/^deb[[:space:]]\{1,\}\(http[^[:space:]]*\/debian\)\/\{0,1\}[[:space:]]\{1,\}bookworm[[:space:]].*/\1/p' /etc/apt/sources.list | head -1)"
  fi
  echo "${mirror:-http://deb.debian.org/debian}"
}

make_debian_base() {  # agora-standin/debian:bookworm from debootstrap
  local rootfs="$DIR/rootfs" mirror started=$SECONDS
  mirror="$(apt_mirror)"
  rm -rf "$rootfs"
  say "debootstrap --variant=minbase bookworm from $mirror (log: $DIR/debootstrap.log)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$DIR/debootstrap.log" 2>&1 \
    || die "debootstrap failed (log: $DIR/debootstrap.log)"
  # The image's apt sees what the host's does (bookworm, its updates and security).
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/debian.sources"
    rm -f "$rootfs/etc/apt/sources.list"
  fi
  # The host's own certificate authorities (/usr/local/share/ca-certificates): where an egress proxy
  # inspects TLS, as on this kind of machine, pip inside a build needs them; images that install
  # ca-certificates trust them (update-ca-certificates reads that folder).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$rootfs/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
  fi
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  tar -C "$rootfs" -c . | docker import \
    -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'ENV LANG=C.UTF-8' \
    -c 'CMD ["bash"]' -m "debootstrap --variant=minbase bookworm $mirror" - "$DEBIAN_BASE" >/dev/null \
    || die "docker import of $rootfs failed"
  rm -rf "$rootfs"
  say "made $DEBIAN_BASE in $((SECONDS - started)) s"
}

standin() {  # standin NAME FOLDER: docker build docker/standins/FOLDER as NAME
  local name="$1" folder="$ROOT/docker/standins/$2" started=$SECONDS
  have "$DEBIAN_BASE" || make_debian_base
  say "building the stand-in $name from $folder (log: $DIR/build-$2.log)"
  docker build --network host -t "$name" "$folder" >"$DIR/build-$2.log" 2>&1 \
    || { tail -20 "$DIR/build-$2.log" >&2; die "building $name failed (log: $DIR/build-$2.log)"; }
  say "made $name in $((SECONDS - started)) s"
}

base_images() {  # the Dockerfile's base, PostgreSQL and Redis: pulled, or their stand-ins
  local base
  base="$(dockerfile_base)"
  case "$base" in
    python:3.11*) ;;
    *) die "docker/Dockerfile starts FROM $base; the stand-in (docker/standins/python) makes python:3.11 only" ;;
  esac
  have "$base" || pulled "$base" || standin "$base" python
  if have "${POSTGRES_IMAGE:-postgres:16-bookworm}" || pulled "${POSTGRES_IMAGE:-postgres:16-bookworm}"; then
    rm -f "$DIR/postgres.standin"
  else
    have "$POSTGRES_STANDIN" || standin "$POSTGRES_STANDIN" postgres
    echo "$POSTGRES_STANDIN" >"$DIR/postgres.standin"
  fi
  if have "${REDIS_IMAGE:-redis:7-bookworm}" || pulled "${REDIS_IMAGE:-redis:7-bookworm}"; then
    rm -f "$DIR/redis.standin"
  else
    have "$REDIS_STANDIN" || standin "$REDIS_STANDIN" redis
    echo "$REDIS_STANDIN" >"$DIR/redis.standin"
  fi
}

print_env() {
  echo "export DOCKER_HOST=$DOCKER_HOST"
  [ ! -s "$DIR/postgres.standin" ] || echo "export POSTGRES_IMAGE=$(cat "$DIR/postgres.standin")"
  [ ! -s "$DIR/redis.standin" ] || echo "export REDIS_IMAGE=$(cat "$DIR/redis.standin")"
}

case "$ACTION" in
  start)
    mkdir -p "$DIR"
    install_missing "$@"
    if running; then
      say "dockerd of $DIR runs (pid $(cat "$PIDFILE"))"
    else
      rm -f "$PIDFILE" "$SOCK"
      driver="${AGORA_DOCKER_STORAGE_DRIVER:-}"
      if [ -z "$driver" ]; then
        driver=vfs
        ! grep -qw overlay /proc/filesystems || driver=overlay2
      fi
      if ! start_daemon "$driver"; then
        [ "$driver" != vfs ] && [ -z "${AGORA_DOCKER_STORAGE_DRIVER:-}" ] || { tail -20 "$LOG" >&2; die "dockerd did not start (log: $LOG)"; }
        say "dockerd refused $driver; trying vfs"
        start_daemon vfs || { tail -20 "$LOG" >&2; die "dockerd did not start (log: $LOG)"; }
      fi
      say "dockerd runs (pid $(cat "$PIDFILE"), socket $SOCK)"
    fi
    base_images
    print_env
    ;;
  build)
    running || die "no dockerd of $DIR runs: scripts/docker_engine.sh start first"
    started=$SECONDS
    say "building $AGORA_IMAGE from docker/Dockerfile (log: $DIR/build-agora.log)"
    (cd "$ROOT" && docker build --network host -f docker/Dockerfile -t "$AGORA_IMAGE" .) >"$DIR/build-agora.log" 2>&1 \
      || { tail -30 "$DIR/build-agora.log" >&2; die "building $AGORA_IMAGE failed (log: $DIR/build-agora.log)"; }
    say "built $AGORA_IMAGE in $((SECONDS - started)) s"
    ;;
  env)
    print_env
    ;;
  status)
    running
    ;;
  stop)
    if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      pid="$(cat "$PIDFILE")"
      grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null || die "pid $pid of $PIDFILE is not a dockerd; left alone"
      say "stopping dockerd (pid $pid)"
      kill "$pid"
      for _ in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
      done
      ! kill -0 "$pid" 2>/dev/null || { say "dockerd (pid $pid) still runs after 60 s; killing it"; kill -9 "$pid"; }
    else
      say "no dockerd of $DIR runs"
    fi
    rm -f "$PIDFILE"
    # What the daemon may leave mounted under DIR (its network namespace file), so that DIR can go.
    { findmnt -rn -o TARGET | grep "^$DIR/" || true; } | sort -r | while read -r target; do umount -l "$target" || true; done
    if $PURGE; then
      say "deleting $DIR"
      rm -rf "$DIR"
    fi
    ;;
  *)
    echo "usage: $0 start|build|env|status|stop [DIR] [--purge]" >&2
    exit 2
    ;;
esac
