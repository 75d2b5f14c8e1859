"""A pilot's (and a planned machine's allocation's) driver script and files.

Files: ``JOB_DIR/job.sbatch``; in a pilot or lease directory ``pilot.json`` (tasks, window,
the lease), ``pilot.sbatch`` (the driver), ``task.I.sh`` (one ``run_task`` line per task, mode
0600 as it carries the task's environment), ``slot.I`` (index I claimed, by agora before it
writes ``task.I.sh`` or by the driver to end), and ``pid.I``, ``exit.I``, ``cancel.I``,
``skipped.I`` per task.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agora_optimizer.executor.jobs.spec import JobSpec, MachineLease
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.slurm.values import mib

PILOT_FORMAT = "agora-slurm-pilot/1"


# The job's end waits for its worker's whole session: a worker killed by a signal (kill -9, a node's
# OOM killer) leaves Airflow's supervisor and the task (in a process group of its own) running, and
# SLURM's linuxproc tracking loses processes whose parent died. The job ends only once they are gone,
# so the retry Airflow starts when the job is reported failed never runs beside them.
REAP_SESSION = 'pkill -KILL -s "$1" 2>/dev/null; while pgrep -s "$1" >/dev/null 2>&1; do sleep 0.2; done'


PILOT_DRIVER = """#!/bin/bash
# agora allocation driver, written by agora_optimizer.executor.backends.slurm, for a pilot and for a
# planned machine's lease alike. Usage: pilot.sbatch MODE CORES MEMORY_MIB IDLE_S [GPUS], in the
# allocation's directory (--chdir). It runs task.0.sh, task.1.sh ... (each one run_task or run_gpu_task
# line) in that order, each in its own job directory, several at once while their cores, memory and GPUs
# fit CORES, MEMORY_MIB (0: no limit) and GPUS (default 0); a task that does not fit yet waits, and so do
# the ones after it. An allocation with GPUS > 0 hands each task its own GPUs as CUDA_VISIBLE_DEVICES
# (and GPU_DEVICE_ORDINAL), disjoint among the tasks running at once, none to a task without GPUs: they
# are taken from the allocation's list as SLURM set it (CUDA_VISIBLE_DEVICES, else SLURM_JOB_GPUS), or
# 0 .. GPUS-1 where SLURM set none (count-only GPUs). MODE pilot: every task was written before the
# allocation started, so it is closed from the start. MODE lease: tasks keep coming until the file
# "closed" appears, or none came for IDLE_S seconds. To end, the driver claims the next
# index with mkdir slot.NEXT: agora claims an index the same way before writing its task file, so a task
# is either run here or known by agora never to be. A task is skipped when cancel.INDEX exists before it
# starts, and gets SIGTERM when cancel.INDEX appears while it runs; its exit status goes to exit.INDEX.
# A task's cores, memory and GPUs are free again once its worker writes JOB_DIR/task-ended (the task
# process has exited; Airflow's supervisor may report for seconds more), or at its exit without that mark.
set -u
mode="${1:-pilot}" free_cores="${2:-0}" free_memory="${3:-0}" idle_s="${4:-0}" gpus="${5:-0}"
[ "$free_cores" -gt 0 ] || free_cores=1000000000
[ "$free_memory" -gt 0 ] || free_memory=1000000000000
[ "$mode" = pilot ] && : >closed
free_gpus=()
if [ "$gpus" -gt 0 ]; then
  visible="${CUDA_VISIBLE_DEVICES:-${SLURM_JOB_GPUS:-}}"
  if [ -n "$visible" ]; then IFS=, read -r -a free_gpus <<<"$visible"; else free_gpus=($(seq 0 $((gpus - 1)))); fi
fi
declare -A running=() cores_of=() memory_of=() gpus_of=() dir_of=() freed=()
reap_session() { @REAP_SESSION@; }
run_task() {  # run_task INDEX CORES MEMORY_MIB JOB_DIR COMMAND...: a task without GPUs
  run_gpu_task "$1" "$2" "$3" 0 "${@:4}"
}
run_gpu_task() {  # run_gpu_task INDEX CORES MEMORY_MIB GPUS JOB_DIR COMMAND...; status 1: it does not fit yet
  local index="$1" cores="$2" memory="$3" wanted="$4" dir="$5" devices
  shift 5
  if [ -e "cancel.$index" ]; then : >"skipped.$index"; return 0; fi
  if [ "${#running[@]}" -gt 0 ] && { [ "$cores" -gt "$free_cores" ] || [ "$memory" -gt "$free_memory" ] \
    || [ "$wanted" -gt "${#free_gpus[@]}" ]; }; then
    return 1
  fi
  local mine=("${free_gpus[@]:0:wanted}")
  free_gpus=("${free_gpus[@]:wanted}")
  devices="$(IFS=,; echo "${mine[*]}")"
  mkdir -p "$dir"
  (
    cd "$dir" || exit 1
    [ "$gpus" -gt 0 ] && export CUDA_VISIBLE_DEVICES="$devices" GPU_DEVICE_ORDINAL="$devices"
    exec setsid "$@"
  ) >>"$dir/slurm-${SLURM_JOB_ID:-pilot}.log" 2>&1 </dev/null &
  running[$index]=$!
  cores_of[$index]=$cores
  memory_of[$index]=$memory
  gpus_of[$index]="${mine[*]}"
  dir_of[$index]=$dir
  free_cores=$((free_cores - cores))
  free_memory=$((free_memory - memory))
  echo "$!" >"pid.$index"
}
free_task() {  # free_task INDEX: its cores, memory and GPUs go back, once
  [ -n "${freed[$1]:-}" ] && return 0
  free_cores=$((free_cores + cores_of[$1]))
  free_memory=$((free_memory + memory_of[$1]))
  free_gpus+=(${gpus_of[$1]})
  freed[$1]=1
}
stopping=0
stop_all() {
  local pid
  stopping=1
  for pid in "${running[@]}"; do kill -TERM "$pid" 2>/dev/null; done
}
trap stop_all TERM INT
next=0
failed=0
idle_since=$SECONDS
while :; do
  for index in "${!running[@]}"; do
    pid="${running[$index]}"
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      status=$?
      reap_session "$pid"  # what a killed worker left (its task) dies before its exit is told
      echo "$status" >"exit.$index"
      [ "$status" = 0 ] || failed=1
      free_task "$index"
      unset "running[$index]" "cores_of[$index]" "memory_of[$index]" "gpus_of[$index]" "dir_of[$index]" "freed[$index]"
      idle_since=$SECONDS
      continue
    fi
    [ -e "${dir_of[$index]}/task-ended" ] && free_task "$index"
    if [ -e "cancel.$index" ] && [ ! -e "stopped.$index" ]; then
      kill -TERM "$pid" 2>/dev/null
      : >"stopped.$index"
    fi
  done
  while [ "$stopping" = 0 ] && [ -e "task.$next.sh" ] && source "./task.$next.sh"; do
    next=$((next + 1))
    idle_since=$SECONDS
  done
  if [ "${#running[@]}" -eq 0 ] && [ "$stopping" = 1 ]; then break; fi
  if [ "${#running[@]}" -eq 0 ] && [ ! -e "task.$next.sh" ]; then
    if [ -e closed ] || { [ "$idle_s" -gt 0 ] && [ $((SECONDS - idle_since)) -ge "$idle_s" ]; }; then
      mkdir "slot.$next" 2>/dev/null && break  # else agora claimed it: its task file is on its way
    fi
  fi
  sleep 0.5
done
[ "$mode" = pilot ] && exit "$failed"  # a lease's allocation completes: its tasks report their own ends
exit 0
""".replace("@REAP_SESSION@", REAP_SESSION)


@dataclass(frozen=True)
class PilotTask:
    index: int
    key: str
    label: str
    resource: str
    job_dir: Path
    cores: int
    memory_mib: int
    minutes: int
    line: str  # its run_task (or run_gpu_task) line, the whole of its task.INDEX.sh
    gpus: int = 0


def pilot_task(job: JobSpec, index: int, minutes: int) -> PilotTask:
    """``job`` as the ``index``-th task of a pilot or an allocation, with a time limit of ``minutes``: its
    ``run_task`` line (``run_gpu_task`` for a job with GPUs), which carries the job's environment."""
    command = list(job.command)
    if job.environment:
        command = ["env", "--", *(f"{k}={v}" for k, v in job.environment.items()), *command]
    memory = mib(job.memory_bytes)
    # A task without GPUs keeps the line every driver reads; one with GPUs names them (run_gpu_task).
    start = (
        f"run_gpu_task {index} {job.cores} {memory} {job.gpus}"
        if job.gpus
        else f"run_task {index} {job.cores} {memory}"
    )
    line = f"{start} {shlex.quote(str(job.job_dir))} {shlex.join(command)}\n"
    return PilotTask(
        index, job.key, job.label, job.resource, job.job_dir, job.cores, memory, minutes, line, gpus=job.gpus
    )


@dataclass
class Pilot:
    """An allocation this instance hands tasks to: a pilot it gathers (held in SLURM until closed),
    or a planned machine's lease (``lease`` set: running, its tasks handed over one by one)."""

    partition: str
    directory: Path
    minutes: int  # the time limit it was submitted with; lowered to its longest task's on release
    release_at: float  # epoch seconds: the end of its window
    tasks: list[PilotTask] = field(default_factory=list)
    job_id: str = ""
    closed: bool = False
    lease: MachineLease | None = None

    def cores(self, tasks: Sequence[PilotTask] | None = None) -> int:
        return sum(task.cores for task in (self.tasks if tasks is None else tasks))

    def memory_mib(self, tasks: Sequence[PilotTask] | None = None) -> int:
        return sum(task.memory_mib for task in (self.tasks if tasks is None else tasks))

    def manifest(self, tasks: Sequence[PilotTask]) -> str:
        return json.dumps(
            {
                "format": PILOT_FORMAT,
                "slurm_job_id": self.job_id,
                "partition": self.partition,
                "release_at": self.release_at,
                "closed": self.closed,
                "lease": None if self.lease is None else _lease_fields(self.lease),
                "tasks": [
                    {
                        "index": task.index,
                        "key": task.key,
                        "label": task.label,
                        "resource": task.resource,
                        "job_dir": str(task.job_dir),
                        "cores": task.cores,
                        "memory_mib": task.memory_mib,
                        "minutes": task.minutes,
                        "gpus": task.gpus,
                    }
                    for task in tasks
                ],
            },
            indent=1,
        )

    def write(self, tasks: Sequence[PilotTask]) -> None:
        """The files of the tasks not written yet, and the manifest, each replaced at once.

        ``tasks`` shorter than what was written (an append undone) removes the one task file beyond it."""
        for task in tasks[len(self.tasks) :]:
            write_private(self.directory / f"task.{task.index}.sh", task.line)
        (self.directory / f"task.{len(tasks)}.sh").unlink(missing_ok=True)
        write_private(self.directory / "pilot.json", self.manifest(tasks))


def _lease_fields(lease: MachineLease) -> dict[str, object]:
    return {
        "key": lease.key,
        "dag_id": lease.dag_id,
        "run_id": lease.run_id,
        "machine": lease.machine,
        "resource": lease.resource,
        "cores": lease.cores,
        "memory_bytes": lease.memory_bytes,
        "gpus": lease.gpus,
        "tasks": lease.tasks,
        "planned_start_s": lease.planned_start_s,
        "planned_end_s": lease.planned_end_s,
    }


@dataclass(frozen=True)
class Manifest:
    """A pilot's ``pilot.json`` as read back (possibly written by another instance)."""

    directory: Path
    job_dirs: Mapping[int, Path]
    release_at: float
    closed: bool
    partition: str = ""
    job_id: str = ""
    tasks: tuple[PilotTask, ...] = ()
    lease: MachineLease | None = None  # set for a planned machine's allocation

    @classmethod
    def read(cls, directory: Path) -> Manifest | None:
        try:
            raw = json.loads((directory / "pilot.json").read_text())
            if raw.get("format") != PILOT_FORMAT:
                return None
            tasks = tuple(
                PilotTask(
                    int(task["index"]),
                    str(task["key"]),
                    str(task["label"]),
                    str(task["resource"]),
                    Path(task["job_dir"]),
                    int(task["cores"]),
                    int(task["memory_mib"]),
                    int(task["minutes"]),
                    line="",  # written already
                    gpus=int(task.get("gpus", 0)),  # absent in the manifests of agora before GPUs
                )
                for task in raw["tasks"]
            )
            lease = raw.get("lease")
            return cls(
                directory,
                {task.index: task.job_dir for task in tasks},
                float(raw["release_at"]),
                bool(raw["closed"]),
                partition=str(raw["partition"]),
                job_id=str(raw["slurm_job_id"]),
                tasks=tasks,
                lease=None if lease is None else MachineLease(**lease),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def pilot(self) -> Pilot:
        """The allocation as this instance's own again (adopted after a scheduler restart)."""
        return Pilot(
            self.partition,
            self.directory,
            minutes=0,
            release_at=self.release_at,
            tasks=list(self.tasks),
            job_id=self.job_id,
            closed=self.closed,
            lease=self.lease,
        )


@dataclass(frozen=True)
class Capacity:
    """The largest node of a partition, and the partition's time limit."""

    cpus: int
    memory_mib: int
    max_minutes: int | None
