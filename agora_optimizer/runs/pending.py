"""DAG runs whose record is owed: one small file each in ``STATE_DIR/.run-spool`` until it is made.

The run recorder's thread (:mod:`agora_optimizer.runs.record_worker`) keeps a run here before it
tries to record it, and discharges it once its record is in the run store; so does a full queue,
and a recorder that stops with runs still queued. A recorder records what waits here (the next
scheduler's, after a restart). Nothing is lost but what a killed process held in memory (its
queue): ``agora runs record`` re-records every finished run from Airflow's metadata database.

Files are written without fsync: they are to outlive a process, not the machine (after a power
cut, ``agora runs record``). A file that cannot be read is set aside as ``*.bad`` and logged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from agora_optimizer.io.atomic import replace_file
from agora_optimizer.model.workflow import shown
from agora_optimizer.traces.spool import oldest_first, set_aside, spool_dir, spool_path

PENDING_NAME = ".run-spool"


@dataclass(frozen=True)
class EndedRun:
    """A DAG run that ended, by its key in Airflow's metadata database."""

    dag_id: str
    run_id: str


def keep(run: EndedRun, directory: Path | None = None) -> Path:
    """Keep ``run`` until :func:`discharge`; returns its file (kept once however often). Raises OSError."""
    target = directory if directory is not None else spool_dir(PENDING_NAME)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = target / f"{_file_key(run)}.json"
    replace_file(path, json.dumps({"dag_id": run.dag_id, "run_id": run.run_id}), 0o600, durable=False)
    return path


def discharge(run: EndedRun, directory: Path | None = None) -> None:
    """The run's record is made: forget it (nothing happens if it was not kept)."""
    target = directory if directory is not None else spool_path(PENDING_NAME)
    (target / f"{_file_key(run)}.json").unlink(missing_ok=True)


def waiting(directory: Path | None = None) -> list[EndedRun]:
    """The runs kept, oldest first."""
    target = directory if directory is not None else spool_path(PENDING_NAME)
    if not target.is_dir():
        return []
    runs = []
    for path in oldest_first(target):
        try:
            document = json.loads(path.read_text())
            run = EndedRun(document["dag_id"], document["run_id"])
            if not (isinstance(run.dag_id, str) and isinstance(run.run_id, str)):
                raise TypeError(f"dag_id and run_id must be strings, got {shown(run.dag_id)} and {shown(run.run_id)}")
        except FileNotFoundError:
            continue  # discharged meanwhile (another process records from the same directory)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            set_aside(path, "pending run record", exc)
            continue
        runs.append(run)
    return runs


def _file_key(run: EndedRun) -> str:
    return hashlib.sha256(json.dumps([run.dag_id, run.run_id]).encode()).hexdigest()[:32]
