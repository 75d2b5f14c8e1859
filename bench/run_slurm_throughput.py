"""Benchmark: 200 short tasks through the SLURM backend, one job per task and packed into pilot jobs.

Usage:
  python bench/run_slurm_throughput.py [--tasks 200] [--task-s 0.2] [--pilot-max-tasks 25]
      [--out bench/results/slurm-throughput]

Needs the loopback cluster (``bash scripts/start_slurm.sh``). Each task is the agora worker
(``python -m agora_optimizer.executor.worker``, as the executor submits it) running a Python
command that burns ``--task-s`` seconds of CPU, alternating between the partitions ``debug``
and ``compute``. Mode ``jobs``: one ``sbatch`` per task. Mode ``pilot``: Balsam-style pilot
jobs that pack up to ``--pilot-max-tasks`` tasks of a partition into one allocation. For
each mode: wall time from the first submit to the last task reported finished, throughput,
tasks lost (not finished, or finished without a result file or with a nonzero exit), and
how many SLURM jobs it took. The loopback cluster runs on this machine's two cores, so the
absolute numbers say little about a real cluster; the two modes run back to back.

Results: ``OUT.md`` and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.executor.backends.slurm import SlurmBackend  # noqa: E402
from agora_optimizer.executor.jobs.spec import JobSpec, read_result  # noqa: E402

PARTITIONS = ("debug", "compute")


def run(mode: str, tasks: int, task_s: float, pilot_max_tasks: int, root: Path) -> dict[str, object]:
    backend = SlurmBackend(pilot_max_tasks=pilot_max_tasks if mode == "pilot" else 0, pilot_window_s=2.0)
    burn = f"import time; d = time.thread_time() + {task_s}\nwhile time.thread_time() < d: pass"
    specs = []
    for index in range(tasks):
        job_dir = root / mode / f"t{index:04d}"
        job_dir.mkdir(parents=True)
        worker = [sys.executable, "-m", "agora_optimizer.executor.worker", "--job-dir", str(job_dir)]
        partition = PARTITIONS[index % 2]
        specs.append(
            JobSpec(
                key=f"bench-{mode}-{index:04d}",
                label=f"bench.{mode}.{index}",
                resource=f"slurm-{partition}",
                cores=1,
                memory_bytes=256 * 2**20,
                time_limit_s=120.0,
                command=(*worker, "--memory-bytes", str(256 * 2**20), "--", sys.executable, "-c", burn),
                job_dir=job_dir,
                options={"partition": partition},
            )
        )
    started = time.perf_counter()
    ids = [backend.submit(spec) for spec in specs]
    submitted_s = time.perf_counter() - started
    pending = set(ids)
    statuses = {}
    deadline = time.monotonic() + 1800
    while pending and time.monotonic() < deadline:
        for external_id, status in backend.status(sorted(pending)).items():
            if status.phase in ("finished", "lost"):
                statuses[external_id] = status
                pending.discard(external_id)
        time.sleep(1.0)
    wall_s = time.perf_counter() - started
    ok = 0
    for spec, external_id in zip(specs, ids, strict=True):
        status = statuses.get(external_id)
        result = read_result(spec.result_path)
        ok += bool(status and status.succeeded and result is not None and result.exit_code == 0)
    slurm_jobs = len({external_id.split("+")[0] for external_id in ids})
    return {
        "mode": mode,
        "tasks": tasks,
        "slurm_jobs": slurm_jobs,
        "submit_s": round(submitted_s, 2),
        "wall_s": round(wall_s, 1),
        "tasks_per_s": round(tasks / wall_s, 2),
        "finished_ok": ok,
        "lost": tasks - ok,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--task-s", type=float, default=0.2)
    parser.add_argument("--pilot-max-tasks", type=int, default=25)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "slurm-throughput")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agora-bench-slurm-"))
    rows = [run(mode, args.tasks, args.task_s, args.pilot_max_tasks, root) for mode in ("jobs", "pilot")]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        f"# {args.tasks} tasks of {args.task_s:g} s CPU through the SLURM backend (loopback cluster, 2 cores)",
        "",
        "| mode | SLURM jobs | submit (s) | wall (s) | tasks/s | finished ok | lost |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['mode']} | {row['slurm_jobs']} | {row['submit_s']} | {row['wall_s']} | "
            f"{row['tasks_per_s']} | {row['finished_ok']} | {row['lost']} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(row["lost"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
