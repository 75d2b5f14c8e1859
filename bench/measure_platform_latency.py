"""The platform latency a trace store teaches, per (backend, resource type): how the defaults were measured.

Usage:
  python bench/measure_platform_latency.py --store sqlite:////tmp/agora-bench-plans-XXXX/traces.db \\
      --workflows-dir ../shared/data/wfinstances --workflows bacass-dirt02-001,scrnaseq-dirt02-001

Reads every attempt of the store and learns the start and end latency of each type as ``agora
optimize`` does (:func:`agora_optimizer.predict.latency.learn_latency`, a machine freed at its
task's end), with the edges of the replayed WfInstances workflows named (their DAGs are
``dags/agora_wfinstance.py``'s), and prints one line per type: median, p90 and sample count. The
``MEASURED_DEFAULTS`` of ``agora_optimizer/predict/latency.py`` quote its output.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.io.wfformat import load_workflow  # noqa: E402
from agora_optimizer.predict.latency import latency_samples, summarize  # noqa: E402
from agora_optimizer.traces.store import TraceStore  # noqa: E402


def replay_edges(workflows_dir: Path, names: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Each replayed workflow's DAG id and its edges in Airflow task ids."""
    spec = importlib.util.spec_from_file_location("agora_wfinstance_ids", REPO / "dags" / "agora_wfinstance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    edges: dict[str, list[tuple[str, str]]] = {}
    for name in names:
        workflow = load_workflow(workflows_dir / f"{name}.json")
        ids = module.airflow_task_ids([task.id for task in workflow.tasks])
        edges[module.DAG_ID_PREFIX + module._sanitized(name)] = [(ids[e.parent], ids[e.child]) for e in workflow.edges]
    return edges


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True, help="the trace store's SQLAlchemy URL")
    parser.add_argument("--workflows-dir", type=Path, default=REPO / "workflows")
    parser.add_argument("--workflows", default="", help="replayed workflows whose edges to use (comma-separated)")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.workflows.split(",") if name.strip()]
    with TraceStore(args.store) as store:
        attempts = store.attempts()
    samples = latency_samples(attempts, replay_edges(args.workflows_dir, names), freed_at_end=True)
    print(f"{len(attempts)} attempts")
    by_backend: dict[str, tuple[list[float], list[float]]] = {}
    for (backend, resource), (starts, ends) in sorted(samples.items()):
        _print(f"{backend} {resource}", starts, ends)
        together = by_backend.setdefault(backend, ([], []))
        together[0].extend(starts)
        together[1].extend(ends)
    for backend, (starts, ends) in sorted(by_backend.items()):
        _print(f"{backend} (all types)", starts, ends)
    return 0


def _print(what: str, starts: list[float], ends: list[float]) -> None:
    for kind, values in (("start", starts), ("end", ends)):
        if values:
            measured = summarize(values)
            print(
                f"{what} {kind}: median {measured.median_s:.2f} s, p90 {measured.p90_s:.2f} s, "
                f"{measured.samples} samples"
            )


if __name__ == "__main__":
    sys.exit(main())
