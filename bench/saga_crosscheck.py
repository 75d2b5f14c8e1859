"""Cross-check agora's HEFT makespans against the HEFT of ``anrg-saga`` on a few small workflows.

Usage: python bench/saga_crosscheck.py --saga-python /path/to/venv/bin/python
       [--workflows 'workflows/*.json'] [--catalog catalogs/hpc-36.yaml] [--out bench/results/saga-crosscheck.md]

``anrg-saga`` (ANRGUSC/saga) is licensed for non-commercial use only, so agora never
imports it: install it in a virtual environment of its own
(``python3 -m venv /tmp/saga-venv && /tmp/saga-venv/bin/pip install anrg-saga``) and
pass that interpreter. This script runs in agora's environment, writes each instance as
JSON, and runs itself under ``--saga-python`` with ``--driver``, where it imports saga
alone.

Saga's model is the related-machines model of the HEFT paper: one task at a time per
node, runtime = cost / speed, transfer = bytes / bandwidth between two nodes and free
on one node, no memory. So the check uses a catalog whose every type has one core and
fits every task (hpc-36 on the real workflows), with one node per machine. Four
variants per workflow:
- ``6 nodes, no transfers``: one machine per type and every edge's bytes set to 0;
  here both HEFTs rank by the same means, so the makespans should agree (up to ties);
- ``6 nodes``: one machine per type, real bytes. Saga averages a transfer over every
  pair of nodes including a node with itself (free), i.e. ``(n-1)/(n+1)`` of ours;
- ``6 nodes, 10 MB/s``: the same on a slow network, where that difference can show;
- ``36 nodes``: the whole catalog; saga averages runtimes over nodes, ours over types.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLOW_BANDWIDTH_BYTES_PER_S = 1e7  # makes transfers matter, so the two averages of c̄ part ways
DEFAULT_WORKFLOWS = (
    "workflows/*.json",
    "../shared/data/wfinstances/blast-chameleon-small-001.json",
    "../shared/data/wfinstances/montage-chameleon-2mass-005d-001.json",
    "../shared/data/wfinstances/srasearch-chameleon-10a-001.json",
    "../shared/data/wfinstances/epigenomics-chameleon-hep-1seq-100k-001.json",
    "../shared/data/wfinstances/cycles-chameleon-1l-1c-9p-001.json",
)


def driver(instance_path: str) -> None:
    """Runs under saga's interpreter: schedule the instance with saga's HEFT, print its makespan."""
    from saga import Network, TaskGraph  # type: ignore[import-not-found]
    from saga.schedulers.heft import HeftScheduler  # type: ignore[import-not-found]

    instance = json.loads(Path(instance_path).read_text())
    nodes = [(name, speed) for name, speed in instance["nodes"]]
    bandwidth = instance["bandwidth"]
    links = [(a, b, bandwidth) for i, (a, _) in enumerate(nodes) for b, _ in nodes[i + 1 :]]
    network = Network.create(nodes=nodes, edges=links)
    graph = TaskGraph.create(
        tasks=[(name, cost) for name, cost in instance["tasks"]],
        dependencies=[(p, c, size) for p, c, size in instance["edges"]],
    )
    schedule = HeftScheduler().schedule(network, graph)
    print(json.dumps({"makespan_s": schedule.makespan}))


def variants(catalog: Any) -> list[tuple[str, Any, bool]]:
    """(label, catalog, keep transfers) of the three variants."""
    from dataclasses import replace

    from agora_optimizer.model.catalog import Catalog

    single = Catalog(tuple(replace(r, count=1) for r in catalog.resources), catalog.bandwidth_bytes_per_s)
    slow = Catalog(single.resources, SLOW_BANDWIDTH_BYTES_PER_S)
    return [
        ("6 nodes, no transfers", single, False),
        ("6 nodes", single, True),
        ("6 nodes, 10 MB/s", slow, True),
        ("36 nodes", catalog, True),
    ]


def instance_of(workflow: Any, catalog: Any, transfers: bool) -> dict[str, Any]:
    nodes = [(f"{r.name}#{n}", r.speed) for r in catalog.resources for n in range(r.count or 1)]
    return {
        "nodes": nodes,
        "bandwidth": catalog.bandwidth_bytes_per_s,
        "tasks": [(t.id, t.runtime_s) for t in workflow.tasks],
        "edges": [(e.parent, e.child, e.bytes if transfers else 0) for e in workflow.edges],
    }


def saga_makespan(python: str, instance: dict[str, Any]) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(instance, handle)
    try:
        env = dict(os.environ, PYTHONHASHSEED="0")  # saga iterates over frozensets of nodes
        done = subprocess.run(
            [python, str(Path(__file__).resolve()), "--driver", handle.name],
            capture_output=True,
            text=True,
            check=True,
            env=env,
            timeout=1800,
        )
    finally:
        Path(handle.name).unlink()
    return float(json.loads(done.stdout.strip().splitlines()[-1])["makespan_s"])


def agora_makespan(workflow: Any, catalog: Any) -> float:
    from agora_optimizer.engines.heft import heft_schedule
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.planning.leases import makespan_s
    from agora_optimizer.planning.problem import Problem

    assignments = heft_schedule(Problem.create(workflow, catalog, Objective(kind="time")))
    assert assignments is not None
    return makespan_s(assignments)


def without_transfers(workflow: Any) -> Any:
    from dataclasses import replace

    from agora_optimizer.model.workflow import Workflow

    return Workflow.create(workflow.name, list(workflow.tasks), [replace(e, bytes=0) for e in workflow.edges])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--driver", help=argparse.SUPPRESS)
    parser.add_argument("--saga-python", default="/tmp/saga-venv/bin/python")
    parser.add_argument("--workflows", action="append")
    parser.add_argument("--catalog", type=Path, default=ROOT / "catalogs" / "hpc-36.yaml")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "saga-crosscheck.md")
    args = parser.parse_args(argv)
    if args.driver:
        driver(args.driver)
        return 0
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.wfformat import load_workflow

    catalog = load_catalog(args.catalog)
    found = {p.name: p.resolve() for g in (args.workflows or DEFAULT_WORKFLOWS) for p in ROOT.glob(g)}
    paths = [found[name] for name in sorted(found)]  # one copy of a workflow bundled in two places
    rows = []
    for path in paths:
        workflow = load_workflow(path)
        for label, variant, transfers in variants(catalog):
            used = workflow if transfers else without_transfers(workflow)
            ours = agora_makespan(used, variant)
            theirs = saga_makespan(args.saga_python, instance_of(used, variant, transfers))
            cells = [workflow.name, str(len(workflow.tasks)), label, f"{ours:,.2f}", f"{theirs:,.2f}"]
            rows.append("| " + " | ".join([*cells, f"{ours / theirs:.4f}"]) + " |")
            print(rows[-1], flush=True)
    text = (
        f"# HEFT cross-check against anrg-saga\n\nCatalog: `{args.catalog.name}`. Command: "
        f"`python bench/saga_crosscheck.py {' '.join(argv if argv is not None else sys.argv[1:])}`\n\n"
        "| workflow | tasks | variant | agora HEFT makespan s | saga HEFT makespan s | agora / saga |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
