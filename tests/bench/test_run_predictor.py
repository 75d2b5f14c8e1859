"""``bench/run_predictor.py``: the oracle floor read beside a family's pooled MdAPE is pooled the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from agora_optimizer.io.wfformat import load_workflow
from tests.bench import bench_script
from tests.conftest import wfformat_15, write_json

run_predictor = bench_script("run_predictor")


def _instance(path: Path, runtimes: list[float]) -> Path:
    tasks = [{"id": f"work_{i:08d}", "name": "work", "runtime": r} for i, r in enumerate(runtimes, start=1)]
    return write_json(path, wfformat_15(tasks, name=path.stem))


def test_the_pooled_floor_weighs_every_task_and_the_per_instance_floor_every_instance(tmp_path: Path) -> None:
    """A small instance whose tasks all take 10 s (floor 0) beside a larger one of 1-16 s (its median 4 s misses
    them by 3, 1, 0, 0.5, 0.75: floor 0.75). Per instance the floors' median is 0.375; over the eight tasks,
    as the family's MdAPE is counted, 0.25."""
    paths = [_instance(tmp_path / "tiny-even-001.json", [10.0] * 3), _instance(tmp_path / "tiny-wide-001.json",
             [1.0, 2.0, 4.0, 8.0, 16.0])]  # fmt: skip
    actual = {path: load_workflow(path) for path in paths}
    per_instance = [run_predictor.oracle_mdape(path, actual[path]) for path in paths]
    assert per_instance == [0.0, 0.75]
    assert run_predictor.pooled_oracle_mdape(paths, actual) == pytest.approx(0.25)
