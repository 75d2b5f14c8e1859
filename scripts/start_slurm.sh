#!/usr/bin/env bash
# A real one-host SLURM cluster on loopback with three node types and four partitions, with
# accounting (slurmdbd + MariaDB), for the tests, the queue-wait collector and the SLURM
# executor. No systemd, no cgroups.
#
# Usage: scripts/start_slurm.sh [start] [STATE_DIR]             install if absent, configure, start (idempotent)
#        scripts/start_slurm.sh stop [STATE_DIR [DAEMON...]]   stop the daemons this script started (those named)
#        scripts/start_slurm.sh status [STATE_DIR]              say what runs; exit 1 when SLURM does not answer
#
# A start starts only the daemons that do not run, and says which: `start_slurm: started DAEMON...
# (SLURM VERSION)`, or `already running`. DAEMON is munged, mariadbd, slurmdbd, slurmctld or
# slurmd-NODE (the name of its pid file in STATE_DIR/run); `stop STATE_DIR DAEMON...` stops just
# those, so that a caller (the test suite, tests/slurm_cluster.py) stops what it started and leaves
# a cluster it found running. Daemons restarted because the configuration changed ran before: they
# are named apart (`restarted DAEMON...`). A start that fails stops what it had started.
#
# STATE_DIR defaults to /tmp/agora-slurm; it holds slurm.conf, slurmdbd.conf, the MariaDB data,
# the logs and the pid files. Clients need SLURM_CONF=STATE_DIR/slurm.conf, which the script
# prints; when /etc/slurm/slurm.conf is absent (or is our link), it is linked there too.
#
# The cluster: three nodes, each its own slurmd (`slurmd -N NAME`) on this host at 127.0.0.1 with
# its own port, spool, pid and log file (%n in slurm.conf):
#   agora-small  AGORA_SLURM_SMALL_CPUS (8) CPUs, AGORA_SLURM_SMALL_MEMORY_MB (8192) MiB, slurmd
#                port AGORA_SLURM_SLURMD_PORT (6818); the only node of partition `debug` (default)
#   agora-large  AGORA_SLURM_LARGE_CPUS (16) CPUs, AGORA_SLURM_LARGE_MEMORY_MB (32768) MiB, slurmd
#                port AGORA_SLURM_LARGE_PORT (6820); the only node of partition `compute`
#   agora-gpu    AGORA_SLURM_GPU_CPUS (4) CPUs, AGORA_SLURM_GPU_MEMORY_MB (8192) MiB and
#                AGORA_SLURM_GPUS (2) GPUs (generic resource gpu:loopback), slurmd port
#                AGORA_SLURM_GPU_PORT (6821); the only node of partition `accel`
# and a fourth partition, `spot`: preemptible capacity on agora-large (PriorityTier 0 below
# compute's 1, PreemptType=preempt/partition_prio, PreemptMode=CANCEL). A compute job that needs
# the cores or memory of a running spot job makes slurmctld cancel it (SIGTERM, SIGKILL after
# KillWait; state PREEMPTED), as an owner takes its machine back (docs/spot.md).
# The GPUs are placeholders, not devices: gres.conf points each at a link to /dev/null in
# STATE_DIR/gpu (gpu0, gpu1 ...; slurmd 22.05 drops a File= that is not a character or block
# device, and with it the job's CUDA_VISIBLE_DEVICES), which is all SLURM needs to count them,
# allocate them to jobs (--gres=gpu[:loopback]:N) and set a job's CUDA_VISIBLE_DEVICES and
# SLURM_JOB_GPUS to the indices it got. Accounting tracks them (AccountingStorageTRES=gres/gpu:
# sacct's AllocTRES has gres/gpu=N).
# Both claim more than the machine may have, which SLURM accepts with
# SlurmdParameters=config_overrides; catalogs/slurm-loopback.yaml describes the same three types.
# Memory is a consumable resource (CR_Core_Memory, DefMemPerCPU=500), so a partition's queue
# builds up as soon as its requests exceed its node. jobacct_gather/linux samples each job's
# processes every second, so sacct reports MaxRSS.
# Accounting: sacct through slurmdbd (which reads slurmdbd.conf beside $SLURM_CONF) and a private
# MariaDB in STATE_DIR/mysql on 127.0.0.1:3307; every finished job is also written by
# jobcomp/filetxt to STATE_DIR/jobcomp.txt (a fallback that needs no database). munged runs on
# its default socket with /etc/munge/munge.key (a munged already running there is reused).
# Timings on this 2-core VM: cold (apt-get install + first start) 36 s; from stopped 2 s;
# already running 0.3 s.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"  # apt_get, apt_install, require_installer

ACTION="start"
case "${1:-}" in
  start | stop | status) ACTION="$1"; shift ;;
esac
STATE="${1:-${AGORA_SLURM_STATE:-/tmp/agora-slurm}}"
[ "$#" -gt 0 ] && shift
DAEMONS=("$@")  # stop: just these
SMALL_CPUS="${AGORA_SLURM_SMALL_CPUS:-8}"
SMALL_MEMORY_MB="${AGORA_SLURM_SMALL_MEMORY_MB:-8192}"
LARGE_CPUS="${AGORA_SLURM_LARGE_CPUS:-16}"
LARGE_MEMORY_MB="${AGORA_SLURM_LARGE_MEMORY_MB:-32768}"
GPU_CPUS="${AGORA_SLURM_GPU_CPUS:-4}"
GPU_MEMORY_MB="${AGORA_SLURM_GPU_MEMORY_MB:-8192}"
GPUS="${AGORA_SLURM_GPUS:-2}"
GPU_TYPE=loopback
CTLD_PORT="${AGORA_SLURM_CTLD_PORT:-6817}"
SLURMD_PORT="${AGORA_SLURM_SLURMD_PORT:-6818}"
LARGE_PORT="${AGORA_SLURM_LARGE_PORT:-6820}"
GPU_PORT="${AGORA_SLURM_GPU_PORT:-6821}"
NODES=(agora-small agora-large agora-gpu)
# Every daemon by its pid file's name, in the order of stopping: the nodes first, munge last (slurmd
# is the one-node cluster this script started before).
STOP_ORDER=("${NODES[@]/#/slurmd-}" slurmd slurmctld slurmdbd mariadbd munged)
DBD_PORT="${AGORA_SLURM_DBD_PORT:-6819}"
DB_PORT="${AGORA_SLURM_DB_PORT:-3307}"
CLUSTER="agora"
HOST="$(hostname -s)"

if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "start_slurm.sh: needs root (or sudo) to install and start SLURM" >&2; exit 1; }
  exec sudo -E bash "$0" "$ACTION" "$STATE" "${DAEMONS[@]}"
fi
umask 022

say() { echo "start_slurm: $*"; }
die() { echo "start_slurm: error: $*" >&2; exit 1; }

alive() {  # alive PIDFILE: the pid in the file runs
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...: retry COMMAND every 0.2 s
  local seconds="$1" what="$2"; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "start_slurm: error: $what not ready after ${seconds}s" >&2; return 1; }
    sleep 0.2
  done
}

stop_pid() {  # stop_pid NAME PIDFILE: TERM, then KILL after 10 s
  local name="$1" pidfile="$2" pid
  alive "$pidfile" || { rm -f "$pidfile"; return 0; }
  pid="$(cat "$pidfile")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  say "stopped $name (pid $pid)"
}

do_stop() {  # do_stop [DAEMON...]: stop those (all when none is named), in STOP_ORDER
  local daemon
  for daemon in "${STOP_ORDER[@]}"; do
    if [ "$#" -eq 0 ] || [[ " $* " == *" $daemon "* ]]; then stop_pid "$daemon" "$STATE/run/$daemon.pid"; fi
  done
}

export SLURM_CONF="$STATE/slurm.conf"

for daemon in "${DAEMONS[@]}"; do
  [ "$ACTION" = stop ] || die "$ACTION takes no daemon names ($daemon)"
  [[ " ${STOP_ORDER[*]} " == *" $daemon "* ]] || die "stop: no daemon '$daemon' (one of: ${STOP_ORDER[*]})"
done
if [ "$ACTION" = stop ]; then
  do_stop "${DAEMONS[@]}"
  exit 0
fi
if [ "$ACTION" = status ]; then
  for d in munged mariadbd slurmdbd slurmctld "${NODES[@]/#/slurmd-}"; do
    if alive "$STATE/run/$d.pid"; then say "$d runs (pid $(cat "$STATE/run/$d.pid"))"; else say "$d does not run"; fi
  done
  scontrol ping 2>/dev/null | grep -q UP || exit 1
  exit 0
fi

# One start at a time (two test workers may start the cluster at once): the second finds it running.
mkdir -p "$(dirname "$STATE")"
exec 9>"$STATE.lock"
flock 9

# ---- install (only what is absent) -------------------------------------------------------
need=()
for pair in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client slurmdbd:slurmdbd munged:munge \
  mariadbd:mariadb-server; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || need+=("${pair#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
  [ " ${need[*]} " = " slurm-client " ] || need+=(slurm-wlm)  # the metapackage, as Debian names the set
  say "installing ${need[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  # No init system here: keep the packages' postinst scripts from starting their own daemons.
  policy_added=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && policy_added=1
  fi
  if ! apt_install "$STATE.apt.log" "${need[@]}"; then
    [ "$policy_added" = 1 ] && rm -f /usr/sbin/policy-rc.d
    die "apt-get install ${need[*]} failed (log: $STATE.apt.log)"
  fi
  [ "$policy_added" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi
PATH="/usr/sbin:/sbin:$PATH"
VERSION="$(slurmctld -V | awk '{print $2}')"

# ---- configuration -----------------------------------------------------------------------
mkdir -p "$STATE"/{run,log,spool,ctld,mysql,gpu}
for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$STATE/gpu/gpu$i"; done  # gres.conf's placeholder devices
chmod 755 "$STATE"
SLURM_USER=root

write_if_changed() {  # write_if_changed FILE MODE: stdin to FILE; echo "changed" when it differs
  local file="$1" mode="$2" tmp
  tmp="$(mktemp "$file.XXXX")"
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$file" ] && cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv -f "$tmp" "$file"; echo changed; fi
}

changed=""
changed+="$(write_if_changed "$STATE/slurm.conf" 644 <<EOF
# Written by scripts/start_slurm.sh for a one-host cluster on loopback (SLURM $VERSION):
# three slurmd (-N agora-small, -N agora-large, -N agora-gpu) on 127.0.0.1, each with its own port;
# partition spot is preemptible capacity on agora-large.
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=$SLURM_USER
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/slurmd-%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# A container: no cgroups, no process-tracking kernel features.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Job accounting by polling /proc each second (no cgroups needed): sacct's MaxRSS, AveCPU.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=1
MpiDefault=none
# GPUs as generic resources (placeholder files, see gres.conf beside this file).
GresTypes=gpu
SwitchType=switch/none
ReturnToService=2
# Reject at submission what a partition could never run (time above MaxTime ...).
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
# Scheduling: FIFO with backfill; cores and memory are consumable, so requests queue.
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=5,sched_min_interval=100000,batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Preemption by partition: a job of a higher PriorityTier may cancel the running jobs of a lower
# tier on its nodes. Only spot (tier 0; the others keep the default 1) shares a node, compute's.
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
DefMemPerCPU=500
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
# Accounting: slurmdbd + MariaDB (sacct), and a text file of finished jobs as a fallback.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/jobcomp.txt
NodeName=agora-small NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$SLURMD_PORT CPUs=$SMALL_CPUS RealMemory=$SMALL_MEMORY_MB State=UNKNOWN
NodeName=agora-large NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$LARGE_PORT CPUs=$LARGE_CPUS RealMemory=$LARGE_MEMORY_MB State=UNKNOWN
NodeName=agora-gpu NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$GPU_PORT CPUs=$GPU_CPUS RealMemory=$GPU_MEMORY_MB Gres=gpu:$GPU_TYPE:$GPUS State=UNKNOWN
PartitionName=debug Nodes=agora-small Default=YES MaxTime=1:00:00 State=UP
PartitionName=compute Nodes=agora-large Default=NO MaxTime=1-00:00:00 State=UP
PartitionName=accel Nodes=agora-gpu Default=NO MaxTime=1-00:00:00 State=UP
# Preemptible capacity on compute's node: a compute job that needs the cores or memory of a
# running spot job makes SLURM cancel it (state PREEMPTED), as an owner takes its machine back.
PartitionName=spot Nodes=agora-large Default=NO MaxTime=1-00:00:00 PriorityTier=0 PreemptMode=CANCEL State=UP
EOF
)"
changed+="$(write_if_changed "$STATE/gres.conf" 644 <<EOF
# Written by scripts/start_slurm.sh: agora-gpu's GPUs, links to /dev/null standing in for /dev/nvidia0 ...
NodeName=agora-gpu Name=gpu Type=$GPU_TYPE File=$STATE/gpu/gpu[0-$((GPUS - 1))]
EOF
)"
changed+="$(write_if_changed "$STATE/slurmdbd.conf" 600 <<EOF
# Written by scripts/start_slurm.sh: slurmdbd on loopback, storing into the MariaDB of $STATE/mysql.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$SLURM_USER
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=agora
StorageLoc=slurm_acct_db
EOF
)"
if [ ! -e /etc/slurm/slurm.conf ] || [ "$(readlink /etc/slurm/slurm.conf)" = "$STATE/slurm.conf" ]; then
  mkdir -p /etc/slurm && ln -sfn "$STATE/slurm.conf" /etc/slurm/slurm.conf
fi
restarted=()  # running before this start, stopped for the new configuration: not ours to stop later
if [ -n "$changed" ] && alive "$STATE/run/slurmctld.pid"; then
  say "configuration changed: restarting the daemons"
  for daemon in "${STOP_ORDER[@]}"; do alive "$STATE/run/$daemon.pid" && restarted+=("$daemon"); done
  do_stop
fi

started=()
# A start that fails stops what it started (the daemons before the one that failed).
trap 'status=$?; if [ "$status" != 0 ] && [ "${#started[@]}" -gt 0 ]; then
  echo "start_slurm: stopping what this start started: ${started[*]}" >&2; do_stop "${started[@]}" >&2; fi' EXIT
# ---- munge (the default socket, so that every client finds it; a munged already there is reused) ----
if ! munge -n >/dev/null 2>&1 && ! alive "$STATE/run/munged.pid"; then
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chmod 400 /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  munged --force --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" 9>&-
  started+=(munged)
  wait_for 10 munged munge -n
fi

# ---- MariaDB (private data directory, TCP on loopback) ---------------------------------------
if ! alive "$STATE/run/mariadbd.pid"; then
  if [ ! -d "$STATE/mysql/mysql" ]; then
    mariadb-install-db --user=root --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
      --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed (log: $STATE/log/mariadb-install.log)"
  fi
  nohup mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --bind-address=127.0.0.1 --port="$DB_PORT" \
    --socket="$STATE/run/mysqld.sock" --pid-file="$STATE/run/mariadbd.pid" --log-error="$STATE/log/mariadb.log" \
    --innodb-buffer-pool-size=64M --innodb-log-file-size=16M >/dev/null 2>&1 9>&- &
  echo $! >"$STATE/run/mariadbd.pid"
  started+=(mariadbd)
  wait_for 60 mariadbd mariadb --no-defaults --socket="$STATE/run/mysqld.sock" -e 'SELECT 1'
  mariadb --no-defaults --socket="$STATE/run/mysqld.sock" <<'SQL'
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'agora';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'agora';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
fi

# ---- slurmdbd, slurmctld, one slurmd per node ------------------------------------------------
if ! alive "$STATE/run/slurmdbd.pid"; then
  slurmdbd 2>>"$STATE/log/slurmdbd.log" 9>&- || die "slurmdbd did not start (log: $STATE/log/slurmdbd.log)"
  started+=(slurmdbd)
fi
# slurmdbd may open its port before it reaches MariaDB (it retries every 5 s on a loaded machine),
# so wait until it answers a query, not until the port is open.
if ! wait_for 90 slurmdbd sacctmgr -i -n list cluster format=cluster; then
  tail -15 "$STATE/log/slurmdbd.log" >&2
  die "slurmdbd does not answer on 127.0.0.1:$DBD_PORT (log: $STATE/log/slurmdbd.log)"
fi
if ! sacctmgr -i -n list cluster format=cluster 2>/dev/null | grep -qw "$CLUSTER"; then
  sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER failed"
fi
if ! alive "$STATE/run/slurmctld.pid"; then
  slurmctld -f "$STATE/slurm.conf" -i 2>>"$STATE/log/slurmctld.log" 9>&- || die "slurmctld did not start (log: $STATE/log/slurmctld.log)"
  started+=(slurmctld)
  wait_for 30 slurmctld scontrol ping
fi
for node in "${NODES[@]}"; do
  if ! alive "$STATE/run/slurmd-$node.pid"; then
    /usr/sbin/slurmd -f "$STATE/slurm.conf" -N "$node" 2>>"$STATE/log/slurmd-$node.log" 9>&- \
      || die "slurmd -N $node did not start (log: $STATE/log/slurmd-$node.log)"
    started+=("slurmd-$node")
  fi
done
node_ready() { sinfo -h -n "$1" -o '%t' | grep -Eq '^(idle|mix|alloc)'; }
for node in "${NODES[@]}"; do
  if ! wait_for 30 "node $node" node_ready "$node"; then
    scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
    wait_for 15 "node $node" node_ready "$node" \
      || { sinfo -N >&2; tail -20 "$STATE/log/slurmd-$node.log" >&2; die "node $node is not idle"; }
  fi
done

trap - EXIT
fresh=()
for daemon in "${started[@]}"; do [[ " ${restarted[*]} " == *" $daemon "* ]] || fresh+=("$daemon"); done
[ "${#restarted[@]}" -eq 0 ] || say "restarted ${restarted[*]} (SLURM $VERSION)"
if [ "${#fresh[@]}" -gt 0 ]; then say "started ${fresh[*]} (SLURM $VERSION)"; else say "already running (SLURM $VERSION)"; fi
say "state in $STATE; logs in $STATE/log"
echo "export SLURM_CONF=$STATE/slurm.conf"
sinfo -N -o '%N %P %c %m %t' 
