"""SLURM: each task attempt is one batch job in its resource's partition, or one task of a pilot.

A catalog resource with ``backend: slurm`` names its partition (``partition: compute``); a task
that asks for one runs there, as a batch job of its own or packed with other short tasks into a
pilot, or in the allocation of a planned machine. Every SLURM command goes through the one
SLURM client, :mod:`agora_optimizer.slurm`.

The modules, each a layer of :class:`SlurmBackend` (a subclass of the one before), say the
details: ``submission`` (the settings, the SLURM commands, one batch job per task, external
ids), ``pilot_files`` (the driver script and files of a pilot or an allocation), ``pilot``
(gathering short tasks into pilots), ``leases`` (planned machines) and ``backend`` (the Backend
calls, status and adoption).
"""

from agora_optimizer.executor.backends.slurm.backend import SlurmBackend
from agora_optimizer.executor.backends.slurm.submission import (
    BACKEND,
    JOB_NAME_MAX,
    LEASE_IDLE_S,
    SlurmJobRef,
    job_name,
)

__all__ = ["BACKEND", "JOB_NAME_MAX", "LEASE_IDLE_S", "SlurmBackend", "SlurmJobRef", "job_name"]
