"""Inside a job on spot capacity: was the SIGTERM the worker got a preemption (the platform took the machine back)?

A SLURM preemption (``PreemptMode=CANCEL``) sends SIGTERM to every process of the job at once: to the
agora worker, and to Airflow's supervisor and the task under it. A task with a shell child fails at
once (its child died), and its supervisor reports the failure to Airflow within milliseconds, before
the executor can see SLURM's ``PREEMPTED`` and re-run the same try on the fallback (the try is then
FAILED, not RUNNING, and cannot go back to QUEUED). So on spot capacity the worker holds the
supervisor (SIGSTOP) the moment it gets SIGTERM, asks the platform whether the job was preempted, and
then either kills the held tree without a word to Airflow (the try stays RUNNING, and the executor
re-runs it) or lets it go on (SIGCONT: a cancel or a time limit, which the task handles as before).

The executor tells the worker that its job is on spot capacity with ``$AGORA_SPOT``; each platform has
its probe (:func:`probe_for`). Today: SLURM, where ``scontrol show job`` gives a preempted job a
``PreemptTime`` (a cancel, a time limit or a node failure leave it ``None``; the job's state is
``COMPLETING`` in each case while its processes are being killed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from agora_optimizer.slurm.commands import run_slurm
from agora_optimizer.slurm.errors import SlurmCommandError

SPOT_ENV = "AGORA_SPOT"  # "1" in the environment of a job on a spot type (the executor sets it)
PROBE_TIMEOUT_S = 3.0  # SLURM's KillWait (30 s by default) must leave the worker time to write its result

Probe = Callable[[], str]  # '' when not preempted, else the platform's words for the preemption


def probe_for(environ: Mapping[str, str]) -> Probe | None:
    """How a job in ``environ`` learns it was preempted; None: not on spot capacity, or a platform without a probe."""
    if environ.get(SPOT_ENV) != "1":
        return None
    job_id = environ.get("SLURM_JOB_ID", "")
    if job_id:
        return lambda: slurm_preempted(job_id)
    return None


def slurm_preempted(job_id: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """SLURM's words if job ``job_id`` was preempted (its ``PreemptTime`` is set), else ''. A cluster that
    does not answer in time counts as no preemption: the task then handles its SIGTERM as before."""
    try:  # times as POSIX seconds, whatever the site's format
        shown = run_slurm(["scontrol", "show", "job", "--oneliner", job_id], timeout_s)
    except (SlurmCommandError, OSError):
        return ""
    fields = dict(field.split("=", 1) for field in shown.split() if "=" in field)
    preempted_at = fields.get("PreemptTime", "None")
    if not preempted_at.isdigit() or int(preempted_at) <= 0:
        return ""  # "None" (SLURM's word for never), or a time this probe cannot read
    at = datetime.fromtimestamp(int(preempted_at), UTC).isoformat(timespec="seconds")
    partition, node = fields.get("Partition", "?"), fields.get("NodeList", "?")
    return f"SLURM preempted job {job_id} at {at} (partition {partition}, node {node})"
