"""Where the SLURM backend's jobs and pilots live: :class:`Directories`, remembered and bounded.

The backend keeps no state that a new instance needs: a job's directory is also SLURM's record of
it (``WorkDir``, because of ``--chdir``), and a pilot's or an allocation's ``pilot.json`` lists its
tasks' job directories. What is remembered here is used first (it also lets a result file be read
once SLURM has forgotten the job); the oldest entries are forgotten beyond ``remember_max``.
"""

from __future__ import annotations

from pathlib import Path

from agora_optimizer.executor.backends.slurm.pilot_files import Manifest
from agora_optimizer.executor.backends.slurm.submission import SlurmJobRef
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.slurm.jobs import SlurmRecord


class Directories:
    """The job directory of each external id, and the directory of each pilot or allocation, by SLURM id."""

    def __init__(self, remember_max: int) -> None:
        self._jobs: BoundedDict[str, Path] = BoundedDict(remember_max)  # external id -> job dir
        self._pilots: BoundedDict[str, Path] = BoundedDict(remember_max)  # SLURM id of a pilot -> its dir

    def __len__(self) -> int:
        """How many job directories are remembered (at most ``remember_max``)."""
        return len(self._jobs)

    def job(self, external_id: str, job_dir: Path) -> None:
        """Remember the job directory of ``external_id``."""
        self._jobs[external_id] = job_dir

    def pilot(self, job_id: str, directory: Path) -> None:
        """Remember the directory of the pilot (or allocation) SLURM knows as ``job_id``."""
        self._pilots[job_id] = directory

    def pilot_dir(self, job_id: str) -> Path | None:
        """The remembered directory of pilot ``job_id``, if any."""
        return self._pilots.get(job_id)

    def job_dir(self, ref: SlurmJobRef, record: SlurmRecord | None, manifest: Manifest | None) -> Path | None:
        """The job directory of ``ref``: remembered, else SLURM's ``WorkDir`` of a job of its own, else its
        pilot's ``pilot.json``; None when none says."""
        hint = self._jobs.get(str(ref))
        if hint is not None:
            return hint
        if ref.index is None:
            return record.work_dir if record is not None else None
        return manifest.job_dirs.get(ref.index) if manifest is not None else None

    def manifest(self, job_id: str, record: SlurmRecord | None) -> Manifest | None:
        """The ``pilot.json`` of pilot ``job_id``, from its remembered directory or SLURM's ``WorkDir`` of it
        (which is then remembered); None when neither holds one."""
        directory = self._pilots.get(job_id) or (record.work_dir if record else None)
        manifest = None if directory is None else Manifest.read(directory)
        if manifest is not None and directory is not None:
            self._pilots[job_id] = directory
        return manifest
