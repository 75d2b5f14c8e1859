#!/usr/bin/env bash
# Writes the slurm.conf of docker/compose.yaml's SLURM cluster from the environment, the same
# file in every container that needs it (slurmctld, slurm-small, slurm-large, airflow-scheduler):
# they all get the same SLURM_* variables from compose.yaml, so SLURM's check that every daemon
# reads the same slurm.conf holds.
#
# Usage: write-slurm-conf.sh [OUT]     (default /etc/slurm/slurm.conf; "-" for stdout)
#
# The cluster: one controller and two compute nodes of different sizes, one partition each.
#   SLURM_CLUSTER_NAME     agora         ClusterName
#   SLURM_CONTROLLER       slurmctld     the controller's host name (its compose service and hostname)
#   SLURMCTLD_PORT         6817          SLURMD_PORT  6818
#   SLURM_SMALL_CPUS       4             node slurm-small, the only node of partition small (default)
#   SLURM_SMALL_MEMORY_MB  8192
#   SLURM_LARGE_CPUS       8             node slurm-large, the only node of partition large
#   SLURM_LARGE_MEMORY_MB  16384
#   SLURM_MAX_TIME         1-00:00:00    the partitions' MaxTime
#   SLURM_STATE_DIR        /var/spool/slurmctld   SLURMD_SPOOL_DIR  /var/spool/slurmd
#   SLURM_RUN_DIR          /run/slurm             pid files
# A node's name is also its compose service and hostname (slurmd finds its NodeName line by
# hostname; the controller reaches it by that name on the compose network). The nodes may
# declare more CPUs and memory than the Docker host has (SlurmdParameters=config_overrides), as
# a real cluster's would: docker/catalog.yaml describes the same sizes, change them together.
set -euo pipefail

OUT="${1:-/etc/slurm/slurm.conf}"
CLUSTER="${SLURM_CLUSTER_NAME:-agora}"
CONTROLLER="${SLURM_CONTROLLER:-slurmctld}"
CTLD_PORT="${SLURMCTLD_PORT:-6817}"
SLURMD_PORT="${SLURMD_PORT:-6818}"
SMALL_CPUS="${SLURM_SMALL_CPUS:-4}"
SMALL_MEMORY_MB="${SLURM_SMALL_MEMORY_MB:-8192}"
LARGE_CPUS="${SLURM_LARGE_CPUS:-8}"
LARGE_MEMORY_MB="${SLURM_LARGE_MEMORY_MB:-16384}"
MAX_TIME="${SLURM_MAX_TIME:-1-00:00:00}"
STATE_DIR="${SLURM_STATE_DIR:-/var/spool/slurmctld}"
SPOOL_DIR="${SLURMD_SPOOL_DIR:-/var/spool/slurmd}"
RUN_DIR="${SLURM_RUN_DIR:-/run/slurm}"

die() { echo "write-slurm-conf: error: $*" >&2; exit 1; }
for pair in "SLURMCTLD_PORT=$CTLD_PORT" "SLURMD_PORT=$SLURMD_PORT" "SLURM_SMALL_CPUS=$SMALL_CPUS" \
  "SLURM_SMALL_MEMORY_MB=$SMALL_MEMORY_MB" "SLURM_LARGE_CPUS=$LARGE_CPUS" "SLURM_LARGE_MEMORY_MB=$LARGE_MEMORY_MB"; do
  [[ "${pair#*=}" =~ ^[1-9][0-9]*$ ]] || die "${pair%%=*} must be a positive integer, got '${pair#*=}'"
done
for pair in "SLURM_CLUSTER_NAME=$CLUSTER" "SLURM_CONTROLLER=$CONTROLLER"; do
  [[ "${pair#*=}" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || die "${pair%%=*} must be a host name, got '${pair#*=}'"
done
[[ "$MAX_TIME" =~ ^[0-9:-]+$|^UNLIMITED$ ]] || die "SLURM_MAX_TIME must be a SLURM time (e.g. 1-00:00:00), got '$MAX_TIME'"

conf() {
  cat <<CONF
# Written by docker/slurm/write-slurm-conf.sh from the environment (docker/compose.yaml).
ClusterName=$CLUSTER
SlurmctldHost=$CONTROLLER
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
# No log files: the daemons run in the foreground and log to stderr (docker compose logs).
SlurmctldDebug=info
SlurmdDebug=info
# Containers: no cgroups, no process-tracking kernel features.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
EnforcePartLimits=ALL
SlurmdParameters=config_overrides
# Scheduling: FIFO with backfill; cores and memory are consumable, so requests queue.
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
MinJobAge=300
KillWait=10
InactiveLimit=0
Waittime=0
# No slurmdbd: agora reads a job's end from squeue (MinJobAge keeps ended jobs 300 s) and from
# the worker's result.json on the shared state_dir; sacct is not available. Finished jobs are
# also listed in the controller's jobcomp.txt.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE_DIR/jobcomp.txt
NodeName=slurm-small CPUs=$SMALL_CPUS RealMemory=$SMALL_MEMORY_MB State=UNKNOWN
NodeName=slurm-large CPUs=$LARGE_CPUS RealMemory=$LARGE_MEMORY_MB State=UNKNOWN
PartitionName=small Nodes=slurm-small Default=YES MaxTime=$MAX_TIME State=UP
PartitionName=large Nodes=slurm-large Default=NO MaxTime=$MAX_TIME State=UP
CONF
}

if [ "$OUT" = - ]; then
  conf
  exit 0
fi
mkdir -p "$(dirname "$OUT")"
tmp="$(mktemp "$OUT.XXXXXX")"
conf >"$tmp"
chmod 644 "$tmp"
mv -f "$tmp" "$OUT"
echo "write-slurm-conf: wrote $OUT (nodes slurm-small ${SMALL_CPUS} CPUs ${SMALL_MEMORY_MB} MiB, slurm-large ${LARGE_CPUS} CPUs ${LARGE_MEMORY_MB} MiB)" >&2
