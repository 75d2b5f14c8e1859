"""``agora queue ...``: read the SLURM queue, record submitted jobs, train and ask the wait model.

The ``agora`` app mounts this as ``app.add_typer(queue_app, name="queue")``. Errors go through
:func:`agora_optimizer.cli.common.user_errors` (one line on stderr, exit code 2).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from agora_optimizer.cli.common import Range, check_option, command_group, data_table, out_console, say, user_errors
from agora_optimizer.model.catalog import GIB
from agora_optimizer.model.limits import MAX_MACHINE_MEMORY_GIB, MAX_RUNTIME_S

queue_app = command_group("HPC queue wait: read a SLURM queue, record jobs' waits, train and ask the wait model.")


class Method(StrEnum):
    auto = "auto"
    json = "json"
    format_ = "format"


StoreOpt = Annotated[
    str | None,
    typer.Option("--store", help="SQLAlchemy URL of the queue-wait store [default: sqlite under $AIRFLOW_HOME/agora]."),
]
PartitionOpt = Annotated[str, typer.Option("--partition", "-p", help="The SLURM partition.")]
CoresOpt = Annotated[int, typer.Option("--cores", min=1, max=100_000, help="Cores the job asks for.")]
# A SLURM job's request: the ranges of agora_optimizer.model.limits, checked by check_option (one line, nan refused).
JOB_RANGES = {"--mem-gib": Range(0.0, MAX_MACHINE_MEMORY_GIB), "--time-limit-s": Range(1.0, MAX_RUNTIME_S)}
MemOpt = Annotated[float, typer.Option("--mem-gib", help=f"Memory the job asks for (GiB) {JOB_RANGES['--mem-gib']}.")]
TimeOpt = Annotated[
    float | None,
    typer.Option("--time-limit-s", help=f"The job's time limit {JOB_RANGES['--time-limit-s']} [default: unlimited]."),
]
MethodOpt = Annotated[Method, typer.Option("--method", help="How to read squeue: --json, --Format, or auto.")]


def _check_job(mem_gib: float, time_limit_s: float | None) -> None:
    check_option("--mem-gib", mem_gib, JOB_RANGES["--mem-gib"])
    check_option("--time-limit-s", time_limit_s, JOB_RANGES["--time-limit-s"])


@contextmanager
def _errors() -> Iterator[None]:
    """One-line user errors (exit code 2), plus model warnings printed as one line each on stderr."""
    # Airflow, imported first while recording (for [agora] queue_wait_store_url), would route the
    # warnings to its logging instead (it replaces warnings.showwarning): import it before.
    with contextlib.suppress(ImportError):
        import airflow.configuration  # noqa: F401

    with user_errors(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for warning in caught:
                say(f"agora: warning: {warning.message}", err=True)


def default_model_dir() -> Path:
    from agora_optimizer.queue_wait.recorder import default_store_url

    return Path(default_store_url().removeprefix("sqlite:///")).parent / "models" / "queue_wait"


@queue_app.command()
def snapshot(
    method: MethodOpt = Method.auto,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Show the queue now: pending and running jobs, cores and memory per partition."""
    from agora_optimizer.slurm.queue import read_snapshot

    with _errors():
        snap = read_snapshot(method.value)
    rows = []
    for partition in snap.partitions:
        pending, running = snap.pending(partition), snap.running(partition)
        rows.append(
            {
                "partition": partition,
                "pending_jobs": len(pending),
                "pending_cores": sum(j.cores for j in pending),
                "pending_memory_gib": round(sum(j.memory_bytes for j in pending) / GIB, 3),
                "running_jobs": len(running),
                "running_cores": sum(j.cores for j in running),
            }
        )
    if as_json:
        out_console.print_json(
            json.dumps({"taken_at": snap.taken_at.isoformat(), "source": snap.source, "partitions": rows})
        )
        return
    title = f"SLURM queue at {snap.taken_at:%Y-%m-%d %H:%M:%S} UTC ({snap.source})"
    columns = ("partition", "pending jobs", "pending cores", "pending GiB", "running jobs", "running cores")
    cells = [[str(v) for v in row.values()] for row in rows]
    out_console.print(data_table(title, columns, cells, right=columns[1:]))
    if not rows:
        say("no pending or running job")


@queue_app.command()
def record(
    job_id: Annotated[str, typer.Option("--job-id", help="The SLURM job id sbatch printed.")],
    partition: PartitionOpt,
    cores: CoresOpt,
    mem_gib: MemOpt,
    time_limit_s: TimeOpt = None,
    store: StoreOpt = None,
    method: MethodOpt = Method.auto,
) -> None:
    """Record a job just submitted, with the queue it met (read now)."""
    from agora_optimizer.database import mask_url
    from agora_optimizer.queue_wait.recorder import QueueWaitStore, record_submission

    with _errors():
        _check_job(mem_gib, time_limit_s)
        db = QueueWaitStore(store)
        features = record_submission(
            db, job_id, partition, cores, int(mem_gib * GIB), time_limit_s, method=method.value
        )
    say(
        f"recorded job {job_id} in {mask_url(db.url)}: {features.pending_jobs} pending and "
        f"{features.running_jobs} running job(s) in partition {partition}"
    )


@queue_app.command("update")
def update_command(
    store: StoreOpt = None,
    jobcomp: Annotated[
        Path | None, typer.Option("--jobcomp", help="jobcomp/filetxt file to read when sacct has no database.")
    ] = None,
) -> None:
    """Ask SLURM accounting how long the recorded jobs waited, and store it."""
    from agora_optimizer.queue_wait.recorder import QueueWaitStore, update_waits

    with _errors():
        db = QueueWaitStore(store)
        done = update_waits(db, jobcomp)
    say(
        f"{done.started} wait(s) recorded, {done.never_started} job(s) never started, {done.still_waiting} still "
        f"waiting ({done.source}); {len(done.skipped)} malformed accounting row(s) skipped"
    )
    for reason in done.skipped[:10]:
        say(f"agora: skipped: {reason}", err=True)


@queue_app.command()
def train(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write the model to.")],
    store: StoreOpt = None,
    min_samples: Annotated[int, typer.Option(min=1, help="Fewer waits than this: a median fallback.")] = 30,
) -> None:
    """Train the queue-wait model on every recorded wait and write it to --out."""
    from agora_optimizer.queue_wait.model import QueueWaitRegressor, training_data
    from agora_optimizer.queue_wait.model_file import save_model
    from agora_optimizer.queue_wait.recorder import QueueWaitStore

    with _errors():
        features, waits = training_data(QueueWaitStore(store).observations())
        model = QueueWaitRegressor(min_samples=min_samples).fit(features, waits)
        path = save_model(model, out)
    say(model.describe())
    say(f"model written to {path.parent}")


@queue_app.command()
def predict(
    partition: PartitionOpt,
    cores: CoresOpt,
    mem_gib: MemOpt,
    time_limit_s: TimeOpt = None,
    model: Annotated[
        Path | None, typer.Option("--model", help="Model directory [default: $AIRFLOW_HOME/agora/models/queue_wait].")
    ] = None,
    method: MethodOpt = Method.auto,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Predict how long a job would wait in PARTITION's queue if submitted now."""
    from agora_optimizer.queue_wait.features import QueueFeatures
    from agora_optimizer.queue_wait.model import QueueWaitRegressor, features_frame
    from agora_optimizer.queue_wait.model_file import load_model
    from agora_optimizer.slurm.queue import read_snapshot

    with _errors():
        _check_job(mem_gib, time_limit_s)
        directory = model or default_model_dir()
        if model is None and not directory.exists():
            warnings.warn(f"no queue-wait model in {directory}: no data, so the wait is taken as 0 s", stacklevel=1)
            estimator = QueueWaitRegressor().fit(features_frame([]), [])
        else:
            estimator = load_model(directory)
        snap = read_snapshot(method.value)
        features = QueueFeatures.from_snapshot(snap, partition, cores, int(mem_gib * GIB), time_limit_s)
        wait_s = float(estimator.predict(features_frame([features]))[0])
    if as_json:
        out_console.print_json(
            json.dumps(
                {"partition": partition, "wait_s": wait_s, "features": features.as_row(), "model": estimator.describe()}
            )
        )
        return
    say(f"predicted queue wait in {partition}: {wait_s:.1f} s")
    say(estimator.describe())
