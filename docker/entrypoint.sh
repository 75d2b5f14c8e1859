#!/usr/bin/env bash
# The entrypoint of the agora image (docker/Dockerfile), one role per service of docker/compose.yaml:
#
#   entrypoint.sh munge-key        one-shot: create the cluster's munge key in /etc/munge (a volume
#                                  shared by every SLURM container) unless it is there
#   entrypoint.sh slurmctld        the SLURM controller, in the foreground
#   entrypoint.sh slurmd           a compute node, `slurmd -D -N $SLURMD_NODENAME`, in the foreground
#   entrypoint.sh init             one-shot: own the shared volumes, make Airflow's keys in
#                                  AIRFLOW_SECRETS_DIR unless there (airflow/secrets.sh keys),
#                                  `airflow db migrate`, open the trace store (creates its schema)
#   entrypoint.sh airflow ARGS...  an Airflow command (api-server, scheduler, dag-processor,
#                                  triggerer, ...) as user airflow; with AGORA_SLURM_CLIENT=true it
#                                  first writes slurm.conf and starts munged, so that the
#                                  AgoraExecutor's sbatch, squeue and scancel reach the controller;
#                                  the api-server's passwords file is written first, private
#                                  (airflow/secrets.sh admin-password)
#   entrypoint.sh COMMAND...       anything else runs as given (e.g. bash)
#
# Started as root (the image's default user): the SLURM and munge daemons run as root, as
# scripts/start_slurm.sh runs them; Airflow and the tasks run as user airflow (AIRFLOW_UID of the
# image, 50000), on every node, so that job directories on the shared state_dir have one owner.
# slurm.conf is written by docker/slurm/write-slurm-conf.sh from the SLURM_* variables, which
# compose.yaml gives to every SLURM container alike.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MUNGE_KEY=/etc/munge/munge.key
SLURM_CONF_FILE="${SLURM_CONF:-/etc/slurm/slurm.conf}"

say() { echo "entrypoint($ROLE): $*" >&2; }
die() { say "error: $*"; exit 1; }
truthy() { case "${1,,}" in 1 | true | yes | on) return 0 ;; *) return 1 ;; esac; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...: retry COMMAND every second
  local seconds="$1" what="$2" deadline
  shift 2
  deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || { say "$what: not ready after ${seconds}s"; return 1; }
    sleep 1
  done
}

as_airflow() {  # exec COMMAND... as user airflow (as is, when the container already runs as non-root)
  export HOME="${AIRFLOW_HOME:-/opt/airflow}" USER=airflow LOGNAME=airflow
  if [ "$(id -u)" = 0 ]; then
    exec setpriv --reuid=airflow --regid=airflow --init-groups -- "$@"
  fi
  exec "$@"
}

run_as_airflow() {  # run COMMAND... as user airflow, and come back (as is, when not root)
  if [ "$(id -u)" = 0 ]; then
    HOME="${AIRFLOW_HOME:-/opt/airflow}" USER=airflow LOGNAME=airflow setpriv --reuid=airflow --regid=airflow --init-groups -- "$@"
  else
    "$@"
  fi
}

need_root() { [ "$(id -u)" = 0 ] || die "the $ROLE role starts daemons and must run as root"; }

write_slurm_conf() { bash "$HERE/slurm/write-slurm-conf.sh" "$SLURM_CONF_FILE"; }

start_munged() {  # the cluster's key from the shared volume; munged on its default socket
  wait_for "${MUNGE_KEY_WAIT_S:-60}" "munge key $MUNGE_KEY (made by the munge-key service)" test -s "$MUNGE_KEY" \
    || die "no munge key at $MUNGE_KEY: run the munge-key service first (docker compose up munge-key)"
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  munged --force
  wait_for 15 munged munge -n || die "munged did not start"
}

make_munge_key() {
  need_root
  if [ -s "$MUNGE_KEY" ]; then
    say "$MUNGE_KEY exists; kept"
    return 0
  fi
  mkdir -p "$(dirname "$MUNGE_KEY")"
  local tmp
  tmp="$(mktemp "$MUNGE_KEY.XXXXXX")"
  dd if=/dev/urandom of="$tmp" bs=1024 count=1 2>/dev/null
  chown munge:munge "$tmp"  # as Debian's package makes it; munged runs as root with --force, as on loopback
  chmod 400 "$tmp"
  mv -f "$tmp" "$MUNGE_KEY"
  say "created $MUNGE_KEY"
}

own_volumes() {  # the shared directories belong to airflow (named volumes start owned by root)
  local dir
  for dir in "${AIRFLOW_HOME:-/opt/airflow}/logs" "${AIRFLOW__AGORA__STATE_DIR:-}" "${AIRFLOW__AGORA__PLAN_DIR:-}" \
    "$(dirname "${AIRFLOW__AGORA__MODEL_DIR:-/opt/airflow/agora/models/predictor}")"; do
    [ -n "$dir" ] || continue
    mkdir -p "$dir"
    chown airflow:airflow "$dir"
  done
  chown airflow:airflow "${AIRFLOW_HOME:-/opt/airflow}" "${AIRFLOW_HOME:-/opt/airflow}/agora" 2>/dev/null || true
  # Airflow's keys: airflow's alone (the components read them as airflow)
  mkdir -p "$AIRFLOW_SECRETS_DIR"
  chown airflow:airflow "$AIRFLOW_SECRETS_DIR"
  chmod 700 "$AIRFLOW_SECRETS_DIR"
}

ROLE="${1:-}"
[ -n "$ROLE" ] || { ROLE=entrypoint; die "give a role: munge-key, slurmctld, slurmd, init, airflow ARGS..., or a command"; }
shift

case "$ROLE" in
  munge-key)
    make_munge_key
    ;;
  slurmctld)
    need_root
    write_slurm_conf
    start_munged
    state_dir="$(sed -n 's/^StateSaveLocation=//p' "$SLURM_CONF_FILE")"
    mkdir -p "$state_dir" /run/slurm
    # SLURM 22.05 drops a node whose name does not resolve when the controller starts (it becomes
    # FUTURE, hidden from sinfo): wait until the compute nodes' containers are on the network.
    for node in $(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$SLURM_CONF_FILE"); do
      wait_for "${SLURM_NODE_WAIT_S:-120}" "node $node (DNS)" getent hosts "$node" \
        || say "warning: $node does not resolve; SLURM will not use it until slurmctld restarts"
    done
    exec slurmctld -D "$@"
    ;;
  slurmd)
    need_root
    : "${SLURMD_NODENAME:?set SLURMD_NODENAME to the NodeName of this node in slurm.conf}"
    write_slurm_conf
    grep -q "^NodeName=$SLURMD_NODENAME " "$SLURM_CONF_FILE" \
      || die "slurm.conf has no NodeName=$SLURMD_NODENAME (nodes: $(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$SLURM_CONF_FILE" | xargs))"
    start_munged
    mkdir -p "$(sed -n 's/^SlurmdSpoolDir=//p' "$SLURM_CONF_FILE")" /run/slurm
    exec slurmd -D -N "$SLURMD_NODENAME" "$@"
    ;;
  init)
    need_root
    : "${AIRFLOW_SECRETS_DIR:?set AIRFLOW_SECRETS_DIR to the folder of the Airflow keys (the airflow-secrets volume)}"
    own_volumes
    run_as_airflow bash "$HERE/airflow/secrets.sh" keys "$AIRFLOW_SECRETS_DIR"
    say "airflow db migrate"
    run_as_airflow airflow db migrate
    if [ -n "${AIRFLOW__AGORA__TRACE_STORE_URL:-}" ]; then
      say "opening the trace store (creates or upgrades its schema)"
      run_as_airflow agora traces stats --store "$AIRFLOW__AGORA__TRACE_STORE_URL" >/dev/null
    fi
    say "done"
    ;;
  airflow)
    if truthy "${AGORA_SLURM_CLIENT:-false}"; then
      need_root
      write_slurm_conf
      start_munged
      export SLURM_CONF="$SLURM_CONF_FILE"
    fi
    if [ "${1:-}" = api-server ]; then
      # The simple auth manager's users (AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS) take their
      # passwords from this file; a user missing from it gets a generated one, printed in the log.
      run_as_airflow bash "$HERE/airflow/secrets.sh" admin-password \
        "${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-${AIRFLOW_HOME:-/opt/airflow}/simple_auth_manager_passwords.json.generated}"
    fi
    as_airflow airflow "$@"
    ;;
  *)
    exec "$ROLE" "$@"
    ;;
esac
