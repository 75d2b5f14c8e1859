"""One task attempt as one SLURM batch job: its script, its name, and the external ids of the backend.

A catalog resource with ``backend: slurm`` names its partition (``partition: compute``).
:meth:`~agora_optimizer.executor.backends.slurm.backend.SlurmBackend.submit` writes
``JOB_DIR/job.sbatch`` (:func:`single_script`), which ``exec``\\ s the agora worker, and submits it
with ``sbatch`` with the task's cores (``--cpus-per-task``), memory (``--mem``, MiB rounded up) and
time limit (``--time``: the task's limit plus ``time_grace_s``, rounded up to minutes; none: the
partition's default), named ``agora-<key>`` (:func:`job_name`), running in the job directory
(``--chdir``), its output in ``JOB_DIR/slurm-<id>.log``, never requeued (``--no-requeue``: a
preempted job ends as ``PREEMPTED`` even where PreemptMode=REQUEUE). ``--export`` names a few
variables of this process (``PATH``, ``HOME`` ...) and the job's own environment, whose values
sbatch takes from its own environment (never from its command line, where a comma would split a
value): :meth:`~agora_optimizer.executor.backends.slurm.client.SlurmClient.sbatch`.

External ids (:class:`SlurmJobRef`): ``"<slurm job id>"`` for a job of its own,
``"<slurm job id>+<index>"`` for the index-th task of a pilot or of a planned machine's allocation.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass

from agora_optimizer.executor.backends.slurm.pilot_files import REAP_SESSION
from agora_optimizer.executor.jobs.spec import JobSpec
from agora_optimizer.model.workflow import shown

BACKEND = "slurm"
JOB_NAME_MAX = 96
PILOT_SEPARATOR = "+"
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
GRES_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class SlurmJobRef:
    """An external id: a SLURM job id, and the task's index when the job is a pilot."""

    job_id: str
    index: int | None = None

    @classmethod
    def parse(cls, external_id: str) -> SlurmJobRef | None:
        job_id, separator, index = external_id.partition(PILOT_SEPARATOR)
        if not job_id.isdigit() or (separator and not index.isdigit()):
            return None
        return cls(job_id, int(index) if separator else None)

    def __str__(self) -> str:
        return self.job_id if self.index is None else f"{self.job_id}{PILOT_SEPARATOR}{self.index}"


def job_name(key: str, prefix: str = "agora-") -> str:
    """``agora-<key>``, cut to :data:`JOB_NAME_MAX` characters with a hash of the key when longer."""
    name = prefix + UNSAFE_CHARS.sub("_", key)
    if len(name) <= JOB_NAME_MAX:
        return name
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return f"{name[: JOB_NAME_MAX - len(digest) - 1]}-{digest}"


def one_line(text: str) -> str:
    return " ".join(text.split())


def gres_option(gpus: int, gres_type: str | None) -> str:
    """sbatch's request for ``gpus`` GPUs on the node, of ``gres_type`` when given."""
    return f"--gres=gpu:{gres_type}:{gpus}" if gres_type else f"--gres=gpu:{gpus}"


def single_script(job: JobSpec) -> str:
    # SLURM sets CUDA_VISIBLE_DEVICES for GPUs with device files; count-only GPUs get their job's indices.
    devices = ",".join(str(index) for index in range(job.gpus))
    visible = f'[ -n "${{CUDA_VISIBLE_DEVICES:-}}" ] || export CUDA_VISIBLE_DEVICES="${{SLURM_JOB_GPUS:-{devices}}}"\n'
    return (
        "#!/bin/bash\n"
        f"# agora job {one_line(job.key)}: {one_line(job.label)}\n"
        f"# resource {one_line(job.resource)}; written by agora_optimizer.executor.backends.slurm\n"
        f"reap_session() {{ {REAP_SESSION}; }}\n"
        + (visible if job.gpus > 0 else "")
        + f"setsid {shlex.join(job.command)} &\n"  # the worker leads a session of its own: its pid is the session id
        "worker=$!\n"
        "trap 'kill -TERM \"$worker\" 2>/dev/null' TERM INT  # a cancel or time limit reaches the worker\n"
        'while :; do wait "$worker"; status=$?; kill -0 "$worker" 2>/dev/null || break; done\n'
        'reap_session "$worker"\n'
        'exit "$status"\n'
    )


def task_described(job: JobSpec, partition: str) -> str:
    return f"resource {shown(job.resource)} (partition {partition}): {job.label}"
