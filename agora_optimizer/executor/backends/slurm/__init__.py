"""SLURM: each task attempt is one batch job in its resource's partition, or one task of a pilot.

A catalog resource with ``backend: slurm`` names its partition (``partition: compute``).
:meth:`SlurmBackend.submit` writes ``JOB_DIR/job.sbatch``, which ``exec``\\ s the agora worker,
and submits it with ``sbatch`` with the task's cores (``--cpus-per-task``), memory
(``--mem``, MiB rounded up) and time limit (``--time``: the task's limit plus
``time_grace_s``, rounded up to minutes; none: the partition's default), named
``agora-<key>``, running in the job directory (``--chdir``), its output in
``JOB_DIR/slurm-<id>.log``. ``--export`` names a few variables of this process (``PATH``,
``HOME`` ...) and the job's own environment, whose values sbatch takes from its own
environment (never from its command line, where a comma would split a value).

External ids: ``"<slurm job id>"`` for a job of its own, ``"<slurm job id>+<index>"`` for the
index-th task of a pilot.

Status: one ``squeue --states=all`` for every id asked about (pending and running jobs, and
those SLURM has ended within ``MinJobAge``), then one ``sacct`` for the ids squeue no longer
shows and the ended ones without a result file. The worker's ``result.json`` is authoritative
for exit code, OOM kill, peak RSS and CPU time; SLURM's own records give the state, the node
and the submit, start and end times. ``OUT_OF_MEMORY`` means ``oom_killed``; ``TIMEOUT``,
``CANCELLED``, ``NODE_FAIL`` and ``FAILED`` finish with a nonzero exit code and a reason; an id
neither squeue nor sacct knows is ``lost``. An error reaching SLURM raises a transient
:class:`~agora_optimizer.executor.jobs.BackendError` (every command has a timeout, so nothing hangs).

Adoption: the backend keeps no state that a new instance needs. It finds a job's directory
from SLURM's record of it (``WorkDir``, squeue's or sacct's, which is the job directory
because of ``--chdir``; a pilot's is the pilot directory, whose ``pilot.json`` lists its
tasks' job directories). :meth:`SlurmBackend.adopt` takes the directory as a hint too, which
is used first and also lets a result file be read once SLURM has forgotten the job.

The backend is split by what each part does: ``submission`` (one batch job per task, and the
SLURM commands every part runs through :mod:`agora_optimizer.slurm`), ``pilot_files`` (a pilot's
driver script and files), ``pilot`` (gathering tasks into pilots), ``leases`` (planned
machines) and ``backend`` (the :class:`SlurmBackend` calls and status reports).
"""

from agora_optimizer.executor.backends.slurm.backend import SlurmBackend
from agora_optimizer.executor.backends.slurm.leases import LEASE_IDLE_S
from agora_optimizer.executor.backends.slurm.submission import BACKEND, JOB_NAME_MAX, SlurmJobRef, job_name

__all__ = ["BACKEND", "JOB_NAME_MAX", "LEASE_IDLE_S", "SlurmBackend", "SlurmJobRef", "job_name"]
