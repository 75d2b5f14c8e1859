"""Benchmark: the learning loop. Workflows never seen, planned from predictions under a deadline, run, repaired.

Usage:
  python bench/run_learning_loop.py --simulate --train-dir ../shared/data/wfinstances \\
      [--workflows blast-chameleon-small-001,...] [--catalog catalogs/aws-us-east-1.yaml] \\
      --out bench/results/learning-loop-simulated.json

For each workflow of ``--workflows`` (WfFormat files in ``--workflows-dir``; by default every instance of
``--train-dir`` whose family, the name up to its first ``-``, has two or more), a predictor is trained on
every instance of ``--train-dir`` but that one; the workflow is predicted from its shape alone, planned
for time, and planned again for ``--objective`` (cost) under a deadline of ``--deadline-factor`` (1.5)
times that fastest predicted plan's makespan. That plan runs on the true runtimes:

- ``--simulate``: without Airflow (:mod:`agora_optimizer.predict.learning_loop`), the executor's repairs
  replayed as tasks end late (:mod:`agora_optimizer.predict.repair_replay`), beside the plan made from
  the truth under the same deadline and the one-type default; every run marked ``"simulated": true``.

Output: ``--out`` holds ``{"command", "date", "catalog", ..., "runs": [...], "summary": {...}}``, one
object per run (``workflow, planned_makespan_s, actual_makespan_s, deadline_s, deadline_met,
planned_cost_usd, actual_cost_usd, truth_plan_cost_usd, repairs``, the default's planned and actual
cost and makespan, memory over its reservation, the run's forecast once a quarter had run), and
``--out`` with ``.md`` the table against the issue's targets
(:mod:`agora_optimizer.predict.learning_loop_report`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.io.catalog_file import load_catalog  # noqa: E402
from agora_optimizer.model.plan import OBJECTIVE_KINDS  # noqa: E402
from agora_optimizer.predict.learning_loop import LoopSettings, held_out_instances, simulate_instances  # noqa: E402
from agora_optimizer.predict.learning_loop_report import markdown, summary  # noqa: E402
from agora_optimizer.predict.repair_replay import MAX_REPAIRS, REPLAN_SLACK  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "wfinstances"
CATALOGS = {"local": REPO / "catalogs" / "local-priced.yaml"}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    train = sorted(args.train_dir.glob("*.json"))
    if not train:
        raise SystemExit(f"--train-dir: no WfFormat instance (*.json) in {args.train_dir}")
    names = [name.strip() for name in args.workflows.split(",") if name.strip()]
    workflows_dir = args.workflows_dir or args.train_dir
    if names:
        missing = [name for name in names if not (workflows_dir / f"{name}.json").is_file()]
        if missing:
            raise SystemExit(f"--workflows: no {', '.join(missing)} in {workflows_dir}")
        held_out = [workflows_dir / f"{name}.json" for name in names]
    else:
        held_out = held_out_instances(sorted(workflows_dir.glob("*.json")))
    catalog_path = (args.catalog or CATALOGS[args.backend]).resolve()
    label = str(catalog_path.relative_to(REPO) if catalog_path.is_relative_to(REPO) else catalog_path)
    settings = LoopSettings(
        deadline_factor=args.deadline_factor,
        objective=args.objective,
        time_limit_s=args.time_limit_s,
        slack=args.slack,
        interval_s=args.repair_interval_s,
        max_repairs=args.max_repairs,
    )
    if not args.simulate:
        raise SystemExit("--backend local without --simulate: the real runs are not built yet; give --simulate")
    started = time.perf_counter()
    runs = simulate_instances(
        train,
        held_out,
        load_catalog(catalog_path),
        label,
        settings,
        progress=lambda r: print(json.dumps(r), flush=True),
    )
    document: dict[str, Any] = {
        "command": " ".join(["python", "bench/run_learning_loop.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "simulated": True,
        "catalog": label,
        "deadline_factor": settings.deadline_factor,
        "objective": settings.objective,
        "slack": settings.slack,
        "repair_interval_s": settings.interval_s,
        "time_limit_s": settings.time_limit_s,
        "bench_wall_s": round(time.perf_counter() - started, 1),
        "runs": runs,
        "summary": summary(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    table = markdown(document)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-dir", type=Path, default=SHARED, help="WfFormat instances to learn from")
    parser.add_argument("--workflows-dir", type=Path, help="where --workflows are (default: --train-dir)")
    parser.add_argument("--workflows", default="", help="names, comma-separated (default: every held-out instance)")
    parser.add_argument("--backend", choices=sorted(CATALOGS), default="local")
    parser.add_argument("--catalog", type=Path, help="default: the backend's, catalogs/local-priced.yaml")
    parser.add_argument("--simulate", action="store_true", help="replay the loop without Airflow")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "learning-loop.json")
    parser.add_argument("--deadline-factor", type=float, default=1.5)
    parser.add_argument("--objective", choices=OBJECTIVE_KINDS, default="cost")
    parser.add_argument("--time-limit-s", type=float, default=5.0, help="per plan")
    parser.add_argument("--slack", type=float, default=REPLAN_SLACK, help="[agora] replan_slack (0: no repair)")
    parser.add_argument("--repair-interval-s", type=float, default=0.0, help="least time between two repairs")
    parser.add_argument("--max-repairs", type=int, default=MAX_REPAIRS)
    return parser


if __name__ == "__main__":
    sys.exit(main())
