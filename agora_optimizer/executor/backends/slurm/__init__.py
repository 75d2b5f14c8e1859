"""SLURM: each task attempt is one batch job in its resource's partition, or one task of a pilot.

A catalog resource with ``backend: slurm`` names its partition (``partition: compute``); a task
that asks for one runs there, as a batch job of its own or packed with other short tasks into a
pilot, or in the allocation of a planned machine. Every SLURM command goes through the one
SLURM client, :mod:`agora_optimizer.slurm`.

:class:`SlurmBackend` (``backend``) is composed of plain parts, one module each, that say the
details: ``settings`` (the backend's settings, checked once), ``client`` (the SLURM commands and
their errors), ``submission`` (one batch job per task, job names, external ids), ``pilot_files``
(the driver script and files of a pilot or an allocation), ``pilot`` (the pilot packer, gathering
short tasks), ``allocations`` (planned machines), ``directories`` (where each job lives) and
``status`` (the status reports).
"""

from agora_optimizer.executor.backends.slurm.backend import SlurmBackend
from agora_optimizer.executor.backends.slurm.settings import LEASE_IDLE_S
from agora_optimizer.executor.backends.slurm.submission import BACKEND, JOB_NAME_MAX, SlurmJobRef, job_name

__all__ = ["BACKEND", "JOB_NAME_MAX", "LEASE_IDLE_S", "SlurmBackend", "SlurmJobRef", "job_name"]
