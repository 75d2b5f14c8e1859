"""Generate large synthetic WfFormat workflows for the scale benchmark, with fixed seeds.

Usage: python bench/generate_workflows.py [--recipes montage,blast,epigenomics,seismology]
       [--sizes 1000,10000,30000] [--seed 42] [--out bench/data] [--check]

Uses the ``wfcommons`` package (WfChef recipes, which ship their microstructures and task
statistics inside the package, so nothing is fetched over the network). Each file is
``OUT/{recipe}-{size label}.json``, e.g. ``bench/data/montage-10k.json``; a recipe may
land a few tasks under the asked size (WfChef never exceeds it).

Reproducibility: wfcommons draws from Python's ``random`` (microstructure choice),
NumPy's global generator (runtimes and file sizes, through ``scipy.stats``) and
``uuid.uuid4`` (file and node names). All three are seeded here from ``--seed``, the
recipe and the size, and the timestamps and author that wfcommons takes from the clock
and the login are fixed, so the same arguments write the same bytes.

What the files hold (WfFormat 1.6, read by ``agora_optimizer.io.wfformat``): task
``name``/``id``/``parents``/``children``/``inputFiles``/``outputFiles``, file sizes, and per
task ``runtimeInSeconds`` and ``coreCount`` (always 1). They record no ``memoryInBytes``
and no category, so the loader's memory rule gives every task its default (1 GiB) and
categories come from task names.

The output folder holds generated data: keep it out of version control.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RECIPES = ("montage", "blast", "epigenomics", "seismology")
DEFAULT_SIZES = (1000, 10000, 30000)
FIXED_TIMESTAMP = "2026-01-01T00:00:00+00:00"


def size_label(size: int) -> str:
    """1000 -> '1k', 30000 -> '30k', 500 -> '500'."""
    return f"{size // 1000}k" if size % 1000 == 0 else str(size)


def recipe_class(name: str) -> Any:
    """The WfChef recipe class for ``name`` (``montage`` -> ``MontageRecipe``)."""
    from wfcommons.wfchef import recipes  # type: ignore[import-untyped]

    wanted = f"{name}recipe"
    for attribute in dir(recipes):
        if attribute.lower() == wanted:
            return getattr(recipes, attribute)
    known = sorted(a[: -len("Recipe")].lower() for a in dir(recipes) if a.endswith("Recipe"))
    raise SystemExit(f"unknown recipe '{name}'; wfcommons offers: {', '.join(known)}")


def derived_seed(seed: int, recipe: str, size: int) -> int:
    return zlib.crc32(f"{seed}/{recipe}/{size}".encode())


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed every source of randomness that wfcommons' generators use."""
    import numpy as np
    import wfcommons.wfchef.duplicate as duplicate  # type: ignore[import-untyped]

    random.seed(seed)
    np.random.seed(seed)
    names = random.Random(seed ^ 0x5EED)

    def fixed_uuid4() -> uuid.UUID:
        return uuid.UUID(int=names.getrandbits(128), version=4)

    with mock.patch.object(uuid, "uuid4", fixed_uuid4), mock.patch.object(duplicate, "uuid4", fixed_uuid4):
        yield


def generate(recipe: str, size: int, seed: int) -> dict[str, Any]:
    """One WfFormat document of at most ``size`` tasks."""
    from wfcommons import WorkflowGenerator

    name = f"{recipe}-{size_label(size)}"
    with seeded(derived_seed(seed, recipe, size)):
        workflow = WorkflowGenerator(recipe_class(recipe).from_num_tasks(size)).build_workflow(name)
    workflow.created_at = workflow.executed_at = FIXED_TIMESTAMP
    workflow.author_name = "agora bench/generate_workflows.py"
    workflow.generate_json()
    document: dict[str, Any] = workflow.workflow_json
    document["description"] = f"WfChef {recipe} recipe, at most {size} tasks, seed {seed} (agora scale benchmark)"
    return document


def check_loads(path: Path) -> str:
    """Load the file with agora's reader and describe it."""
    from agora_optimizer.io.wfformat import load_workflow

    workflow = load_workflow(path)
    sources = sorted({t.memory_source for t in workflow.tasks})
    return f"{len(workflow.tasks)} tasks, {len(workflow.edges)} edges, memory from {'/'.join(sources)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--recipes", default=",".join(DEFAULT_RECIPES))
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES))
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "data")
    parser.add_argument("--check", action="store_true", help="load every file with agora's WfFormat reader")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for recipe in [r.strip().lower() for r in args.recipes.split(",") if r.strip()]:
        for size in [int(s) for s in args.sizes.split(",") if s.strip()]:
            started = time.perf_counter()
            document = generate(recipe, size, args.seed)
            path = args.out / f"{recipe}-{size_label(size)}.json"
            path.write_text(json.dumps(document, separators=(",", ":")))
            tasks = len(document["workflow"]["specification"]["tasks"])
            line = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {tasks} tasks"
            line += f", {path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - started:.1f} s"
            if args.check:
                line += f"; loads: {check_loads(path)}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
