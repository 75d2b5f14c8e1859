"""Collect real queue waits on the loopback SLURM cluster, then train and test the queue-wait model.

Usage: python bench/collect_queue_waits.py [--jobs 300] [--submit-minutes 11] [--seed 7]
                                           [--store sqlite:////tmp/agora-queue-waits.db]
                                           [--out bench/results/queue-wait.md] [--evaluate-only]

Starts the cluster with scripts/start_slurm.sh (one node of 8 claimed CPUs and 16000 MiB, partitions ``debug``
and ``compute`` sharing it; through harness/loopback_slurm.py, so that the daemons it started are stopped once
the jobs are in, and a cluster found running is left running), then submits short sleep jobs of random size in
bursts, so that a queue builds up and drains again: before each ``sbatch`` it reads the queue (``squeue``) and
records it with the job (agora_optimizer.queue_wait.recorder). When the queue has drained it asks ``sacct``
for every job's wait, keeps the data set as CSV beside the results, and compares the model with a
per-partition median baseline on the last quarter of the jobs (a split in time: the model is trained on the
first three quarters only). It is a benchmark, not a test: it takes about 12 to 15 minutes.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import random
import signal
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agora_optimizer.queue_wait.features import FEATURE_COLUMNS  # noqa: E402
from agora_optimizer.queue_wait.model import QueueWaitRegressor, training_data  # noqa: E402
from agora_optimizer.queue_wait.recorder import (  # noqa: E402
    QueueWaitObservation,
    QueueWaitStore,
    record_submission,
    update_waits,
)
from agora_optimizer.slurm.commands import run_slurm  # noqa: E402
from agora_optimizer.slurm.queue import read_snapshot  # noqa: E402
from harness import loopback_slurm  # noqa: E402

JOB_NAME = "agora-queue-wait-bench"
CORES = (1, 1, 1, 1, 1, 2, 2, 2, 4, 8)
TIME_LIMITS_MIN = (1, 2, 5, 10, 30, 60)


def submit(rng: random.Random) -> tuple[list[str], str, int, int, float]:
    """One random job: (sbatch argv, partition, cores, memory MiB, time limit s)."""
    partition = "debug" if rng.random() < 0.4 else "compute"
    cores = rng.choice(CORES)
    memory_mib = round(math.exp(rng.uniform(math.log(250), math.log(6000))))
    sleep_s = min(20, 1 + int(rng.expovariate(1 / 3.5)))
    limit_min = rng.choice([m for m in TIME_LIMITS_MIN if m * 60 >= sleep_s + 5])
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={JOB_NAME}",
        f"--partition={partition}",
        f"--cpus-per-task={cores}",
        f"--mem={memory_mib}M",
        f"--time={limit_min}",
        "--output=/dev/null",
        "--chdir=/tmp",
        f"--wrap=sleep {sleep_s}",
    ]
    return argv, partition, cores, memory_mib, limit_min * 60.0


def collect(store: QueueWaitStore, jobs: int, submit_minutes: float, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    started = time.monotonic()
    submitted = 0
    snapshot_s: list[float] = []
    while submitted < jobs and time.monotonic() - started < submit_minutes * 60:
        burst = rng.randint(3, 30)
        for _ in range(min(burst, jobs - submitted)):
            argv, partition, cores, memory_mib, limit_s = submit(rng)
            t0 = time.monotonic()
            snap = read_snapshot()  # the queue the job meets, read just before it is submitted
            snapshot_s.append(time.monotonic() - t0)
            job_id = run_slurm(argv).strip().split(";")[0]
            record_submission(store, job_id, partition, cores, memory_mib * 2**20, limit_s, snapshot=snap)
            submitted += 1
            time.sleep(rng.uniform(0.0, 0.4))
        pause = rng.uniform(2.0, 40.0)
        print(f"  {submitted} jobs submitted in {time.monotonic() - started:.0f} s; pause {pause:.0f} s", flush=True)
        time.sleep(pause)
    submit_s = time.monotonic() - started
    deadline = time.monotonic() + 3 * 60
    while read_snapshot(method="format").jobs and time.monotonic() < deadline:
        time.sleep(5)
    left = [j.job_id for j in read_snapshot(method="format").jobs]
    if left:
        print(f"  cancelling {len(left)} job(s) still queued after the drain limit", flush=True)
        run_slurm(["scancel", f"--name={JOB_NAME}"])
    for _ in range(30):  # accounting is written asynchronously by slurmdbd
        done = update_waits(store)
        if done.still_waiting == 0:
            break
        time.sleep(2)
    return {
        "submitted": submitted,
        "submit_s": submit_s,
        "total_s": time.monotonic() - started,
        "snapshot_median_s": statistics.median(snapshot_s) if snapshot_s else 0.0,
        "cancelled": len(left),
    }


def evaluate(observations: list[QueueWaitObservation]) -> dict[str, object]:
    """Train on the first 75 % (in submit order), test on the last 25 %, against partition medians."""
    cut = int(len(observations) * 0.75)
    train, test = observations[:cut], observations[cut:]
    x_train, y_train = training_data(train)
    x_test, y_test = training_data(test)
    model = QueueWaitRegressor().fit(x_train, y_train)
    baseline = QueueWaitRegressor(min_samples=10**9).fit(x_train, y_train)  # partition medians only
    predicted, median_predicted = model.predict(x_test), baseline.predict(x_test)
    err, base_err = np.abs(predicted - y_test), np.abs(median_predicted - y_test)
    return {
        "train": len(train),
        "test": len(test),
        "model_mae_s": float(err.mean()),
        "model_median_ae_s": float(np.median(err)),
        "baseline_mae_s": float(base_err.mean()),
        "baseline_median_ae_s": float(np.median(base_err)),
        "model_describe": model.describe(),
    }


def write_csv(observations: list[QueueWaitObservation], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["job_id", "recorded_at", *FEATURE_COLUMNS, "wait_s"])
        for o in observations:
            row = asdict(o.features)
            writer.writerow([o.job_id, o.recorded_at.isoformat(), *(row[c] for c in FEATURE_COLUMNS), o.wait_s])


def report(run: dict[str, float], found: list[QueueWaitObservation], scores: dict[str, object], counts: dict) -> str:
    waits = np.array([o.wait_s for o in found])
    parts = sorted({o.features.partition for o in found})
    never, waiting = counts.get("never_started", 0), counts.get("waiting", 0)
    per_partition = ", ".join(f"{p} {sum(o.features.partition == p for o in found)}" for p in parts)
    return f"""# Queue wait on a loopback SLURM: data and model

Data: `bench/collect_queue_waits.py` on `scripts/start_slurm.sh`'s one-host cluster (Debian's SLURM
{run["slurm_version"]}, one node claiming 8 CPUs and 16000 MiB, partitions `debug` and `compute` sharing it,
FIFO priority with backfill, cores and memory consumable). {run["submitted"]:.0f} sleep jobs of 1-20 s with
random cores (1-8), memory (250-6000 MiB), time limits (1-60 min) and partition were submitted in
bursts over {run["submit_s"] / 60:.1f} min ({run["total_s"] / 60:.1f} min until the queue had drained); the queue
was read (`{run["snapshot_source"]}`, median {run["snapshot_median_s"] * 1000:.0f} ms) before each `sbatch`, and
each wait (start - eligible) came from `sacct` (slurmdbd + MariaDB).

| | |
| --- | --- |
| jobs submitted | {run["submitted"]:.0f} |
| waits recorded (jobs that started) | {len(found)} ({per_partition}) |
| never started / still waiting | {never} / {waiting} (cancelled at the drain limit: {run["cancelled"]:.0f}) |
| wait: median, 90th percentile, max | {np.median(waits):.1f} s, {np.percentile(waits, 90):.1f} s, {waits.max():.1f} s |
| jobs that waited 0 s | {np.mean(waits == 0):.0%} |

Held-out test: the model is trained on the first {scores["train"]} jobs in submit order and tested on the last
{scores["test"]} (a split in time, not a shuffle: queue states of neighbouring jobs are alike). The baseline
predicts the training median wait of the job's partition, whatever the queue.

| on the {scores["test"]} held-out jobs | mean absolute error | median absolute error |
| --- | ---: | ---: |
| QueueWaitRegressor | {scores["model_mae_s"]:.1f} s | {scores["model_median_ae_s"]:.1f} s |
| partition-median baseline | {scores["baseline_mae_s"]:.1f} s | {scores["baseline_median_ae_s"]:.1f} s |

The trained model says: "{scores["model_describe"]}"

Features (one row per job, read from the queue just before its `sbatch`): the partition; the pending
jobs of that partition and their summed cores, memory, time limits and core-hours; its running jobs,
cores and summed remaining time limits; the pending jobs and cores and the running cores of the other
partition (the two share the node); and the job's own cores, memory and time limit. Waits are whole
seconds (SLURM's accounting resolution), and even on an idle node a job may wait a second or two for
the scheduler's next pass.

The data set is `bench/results/queue-wait-data.csv` (one row per job: the queue features at submit time and
the wait). Reproduce with `python bench/collect_queue_waits.py --seed {run["seed"]:.0f}` (the waits will differ:
they depend on the real scheduler's timing).

**What this does not show.** A loopback cluster is not a production queue: one node, one user, jobs
of seconds rather than hours, no fair-share, no reservations, no other users' jobs arriving while ours
wait, and a scheduler that reacts within a second. The numbers say that the model learns the queue
state to wait relation *of this toy cluster* from a few hundred jobs, not how well it would predict
on a real HPC partition: that needs the waits the project records there (`agora queue record` and
`agora queue update`), and the model's `describe()` says how many it saw.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--submit-minutes", type=float, default=11.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", default="sqlite:////tmp/agora-queue-waits.db")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "queue-wait.md")
    parser.add_argument(
        "--evaluate-only", action="store_true", help="submit nothing: evaluate the waits already in --store again"
    )
    args = parser.parse_args()

    summary_path = args.out.with_suffix(".json")
    if args.evaluate_only:  # the data of an earlier run, evaluated again (say, after a change to the model)
        store = QueueWaitStore(args.store)
        run: dict = json.loads(summary_path.read_text(encoding="utf-8"))["run"]
    else:
        try:
            cluster = loopback_slurm.start()
        except loopback_slurm.SlurmStartError as exc:
            sys.exit(str(exc))
        os.environ["SLURM_CONF"] = str(cluster.conf)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # kill(1) unwinds too: what was started is stopped
        try:
            version = run_slurm(["sinfo", "--version"]).split()[-1]
            db_path = Path(args.store.removeprefix("sqlite:///"))
            if args.store.startswith("sqlite:///") and db_path.exists():
                db_path.unlink()  # one run, one data set
            store = QueueWaitStore(args.store)
            print(f"submitting up to {args.jobs} jobs to SLURM {version} (store {store.url})", flush=True)
            run = dict(collect(store, args.jobs, args.submit_minutes, args.seed))
            run.update(slurm_version=version, seed=args.seed, snapshot_source=read_snapshot().source)
        finally:
            loopback_slurm.stop(cluster)
    found = store.observations()
    counts = store.counts()
    if len(found) < 40:
        sys.exit(f"only {len(found)} waits recorded: too few to evaluate")
    scores = evaluate(found)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(found, args.out.parent / "queue-wait-data.csv")
    args.out.write_text(report(run, found, scores, counts), encoding="utf-8")
    summary = {"run": run, "counts": counts, "scores": scores, "waits_recorded": len(found)}
    summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
