"""The SLURM backend's client: agora's one SLURM client (:mod:`agora_optimizer.slurm`), its errors as BackendErrors.

Every SLURM command of the backend goes through :class:`SlurmClient`, with the backend's command
timeout: its errors become :class:`~agora_optimizer.executor.jobs.spec.BackendError`, transient when SLURM
could not be reached, with the command's own last words. :meth:`SlurmClient.sbatch` submits one job of
one task on one node; an sbatch that timed out may have made its job, which
:meth:`SlurmClient.find_unanswered` finds again by name (or :meth:`SlurmClient.cancel_unanswered` cancels).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from agora_optimizer.executor.backends.slurm.submission import BACKEND, GRES_TYPE, gres_option
from agora_optimizer.executor.jobs.spec import BackendError
from agora_optimizer.executor.worker.environment import is_scheduler_secret
from agora_optimizer.model.workflow import shown
from agora_optimizer.slurm.commands import run_slurm, this_user
from agora_optimizer.slurm.errors import SlurmCommandError, SlurmOutputError
from agora_optimizer.slurm.jobs import SlurmRecord, sacct_jobs, squeue_jobs
from agora_optimizer.slurm.nodes import PartitionNode, partition_gpus, partition_nodes

log = logging.getLogger(__name__)


class NoAnswer(BackendError):
    """A SLURM command did not answer within its timeout (it may have acted)."""


class SlurmClient:
    """Runs the backend's SLURM commands with ``command_timeout_s``; jobs export ``export`` (those set here)."""

    def __init__(self, command_timeout_s: float, export: Sequence[str]) -> None:
        self.command_timeout_s = command_timeout_s
        self.export = tuple(export)
        self._unanswered: set[str] = set()  # job names whose sbatch timed out (the job may exist)

    # -- commands ----------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], environment: Mapping[str, str] | None = None) -> str:
        """Run a SLURM client and return its output; BackendError (transient if SLURM is unreachable)."""
        with self.errors():
            return run_slurm(argv, self.command_timeout_s, environment)

    def run_quietly(self, argv: Sequence[str]) -> bool:
        """Run a SLURM client; a failure is logged, not raised. Whether it succeeded."""
        try:
            self.run(argv)
        except BackendError as exc:
            log.warning("SLURM: %s failed: %s", shlex.join(argv), exc.reason)
            return False
        return True

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """The SLURM client's errors as BackendError: a refusal with SLURM's last words, a silence as
        :class:`NoAnswer`, an answer agora cannot read as transient (read as "no such job", it would
        report running jobs lost and run their tasks a second time; as an outage, the executor waits)."""
        try:
            yield
        except SlurmCommandError as exc:
            if exc.missing:
                raise BackendError(BACKEND, exc.reason, transient=False) from None
            if exc.timed_out:
                reason = f"{exc.program}: no answer within {self.command_timeout_s:g} s"
                raise NoAnswer(BACKEND, reason, transient=True) from None
            said = exc.last_words or f"exit code {exc.returncode}"
            raise BackendError(BACKEND, f"{exc.program} refused: {said}", transient=exc.transient) from None
        except SlurmOutputError as exc:
            raise BackendError(BACKEND, f"{exc.source} answered {exc.reason}", transient=True) from None

    def squeue(self, slurm_ids: Sequence[str]) -> dict[str, SlurmRecord]:
        """squeue's record of each id it still shows."""
        with self.errors():
            return squeue_jobs(slurm_ids, self.command_timeout_s)

    def sacct(self, slurm_ids: Sequence[str]) -> dict[str, SlurmRecord]:
        """Accounting's record of each id it has."""
        with self.errors():
            return sacct_jobs(slurm_ids, self.command_timeout_s)

    def partition_nodes(self, partition: str) -> Sequence[PartitionNode]:
        """The nodes of ``partition`` (sinfo)."""
        with self.errors():
            return partition_nodes(partition, self.command_timeout_s)

    def update(self, job_id: str, *, cores: int, memory_mib: int) -> None:
        """Resize a held job: its cores and its memory per node."""
        self.run(update_argv(job_id, cores=cores, memory_mib=memory_mib))

    # -- submitting --------------------------------------------------------------------------------

    def sbatch(
        self,
        what: str,
        name: str,
        *,
        partition: str,
        cores: int,
        memory_mib: int,
        directory: Path,
        script: Path,
        minutes: int | None = None,
        options: Sequence[str] = (),
        arguments: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
        gpus: int = 0,
        gres_type: str | None = None,
    ) -> str:
        """Submit ``script`` as one job of one task on one node, running and logging in ``directory``;
        return its id. ``what`` names the resource, partition and task (or machine) in errors; the job
        gets ``environment`` (its names in ``--export``, its values from sbatch's environment) and
        ``gpus`` GPUs of the node (``--gres``, of ``gres_type`` when given)."""
        environment = environment or {}
        argv = [
            "sbatch",
            "--parsable",
            f"--partition={partition}",
            f"--job-name={name}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={cores}",
            f"--mem={memory_mib}M",
            *([f"--time={minutes}"] if minutes is not None else []),
            *([gres_option(gpus, gres_type)] if gpus > 0 else []),
            f"--output={directory}/slurm-%j.log",
            f"--chdir={directory}",
            # Never requeued (by a preemption with PreemptMode=REQUEUE, or a node failure): SLURM
            # then ends the job (PREEMPTED, NODE_FAIL) and agora decides where it re-runs.
            "--no-requeue",
            *options,
            self._export(environment),
            str(script),
            *arguments,
        ]
        try:
            out = self.run(argv, environment=environment)
        except NoAnswer as exc:
            self._unanswered.add(name)
            raise BackendError(
                BACKEND,
                f"{what}: {exc.reason}; the job may exist: the next submit of this attempt looks for it by name",
                transient=True,
            ) from None
        except BackendError as exc:
            raise BackendError(BACKEND, f"{what}: {exc.reason}", transient=exc.transient) from None
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise BackendError(BACKEND, f"{what}: sbatch printed no job id: {out.strip()!r}", transient=True)
        return job_id

    def find_unanswered(self, name: str) -> str | None:
        """The job an earlier, timed-out sbatch of ``name`` created, if it did."""
        if name not in self._unanswered:
            return None
        out = self.run(["squeue", "--noheader", "--states=all", f"--name={name}", this_user(), "--Format=JobID"])
        self._unanswered.discard(name)
        ids = sorted(out.split(), key=int)
        return ids[-1] if ids else None

    def cancel_unanswered(self, name: str) -> None:
        """Cancel what a timed-out sbatch of ``name`` may have made (a held pilot, an allocation that
        nobody would use), among this user's jobs only."""
        if name in self._unanswered:
            self.run_quietly(["scancel", f"--name={name}", this_user()])
            self._unanswered.discard(name)

    def check_gpus(self, what: str, partition: str, gpus: int, gres_type: str | None) -> None:
        """BackendError naming the partition and the GPUs of its nodes unless one has ``gpus`` (sbatch would
        refuse with no more than "Requested node configuration is not available")."""
        try:
            with self.errors():
                nodes = partition_gpus(partition, gres_type, self.command_timeout_s)
        except BackendError as exc:
            raise BackendError(BACKEND, f"{what}: {exc.reason}", transient=exc.transient) from None
        if nodes and max(nodes.values()) >= gpus:
            return
        kind = f"GPUs of type {gres_type}" if gres_type else "GPUs"
        has = ", ".join(f"{node} has {count}" for node, count in sorted(nodes.items())) or "it has no nodes"
        raise BackendError(
            BACKEND,
            f"{what}: needs {gpus} {kind} on one node, more than partition {partition} has ({has}; sinfo)",
            transient=False,
        )

    def _export(self, extra: Iterable[str] = ()) -> str:
        names = [name for name in self.export if name in os.environ and not is_scheduler_secret(name)]
        names += [name for name in extra if name not in names]
        return "--export=" + (",".join(names) if names else "NONE")


def gres_type(resource: str, options: Mapping[str, object]) -> str | None:
    """The resource's ``gres_type`` (the GPU type its nodes declare, asked for as ``--gres=gpu:TYPE:N``);
    None without one (any GPU of the node). BackendError naming the resource for a value SLURM cannot take."""
    value = options.get("gres_type")
    if value is None:
        return None
    if not isinstance(value, str) or not GRES_TYPE.match(value):
        raise BackendError(
            BACKEND,
            f"resource {shown(resource)}: 'gres_type' must be a SLURM GPU type such as a100 ([A-Za-z0-9_.-]), "
            f"got {shown(value)}",
            transient=False,
        )
    return value


def update_argv(job_id: str, *, cores: int, memory_mib: int) -> list[str]:
    # NumCPUs and CPUsPerTask together: either alone leaves SLURM 22.05 allocating something else.
    return [
        "scontrol",
        "update",
        f"JobId={job_id}",
        f"NumCPUs={cores}",
        f"CPUsPerTask={cores}",
        f"MinMemoryNode={memory_mib}",
    ]
