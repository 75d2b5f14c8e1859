"""The worst instances the adversarial search found (``bench/run_adversarial.py``), held to the issue's bounds.

One case file per target in ``tests/engines/adversarial/`` (``<target>.json``, the last search's worst; a case
kept from an earlier search has a longer name and says its target inside): agora at the settings of a 10,000-task
workflow within 1.10x the proven optimum, and agora's whole portfolio no worse than any baseline by
more than 1 %; no deadline missed that the reference meets; every plan valid. A case that agora does
not meet yet is listed in :data:`KNOWN` with the reason and the ratio, as a strict xfail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.adversarial.instances import load_case
from bench.adversarial.search import bound_of
from bench.adversarial.targets import Settings, evaluate

CASES = sorted((Path(__file__).parent / "adversarial").glob("*.json"))
EXACT_TIME_LIMIT_S = 30.0  # the search gave each exact engine 5 s; a busy machine needs more to prove the same
# The search gave agora 2 s, on a machine running nothing else; the suite runs two workers beside it, and
# annealing, the last stage, gets what the earlier ones leave of the limit.
AGORA_TIME_LIMIT_S = 5.0
KNOWN: dict[str, str] = {}  # case file name -> why agora misses the bound there, and by how much


def _param(path: Path) -> object:
    reason = KNOWN.get(path.name)
    marks = [pytest.mark.slow] + ([pytest.mark.xfail(strict=True, reason=reason)] if reason else [])
    return pytest.param(path, id=path.stem, marks=marks)


def test_every_target_keeps_a_case() -> None:
    from bench.adversarial.targets import TARGETS

    assert {load_case(path)[1]["target"] for path in CASES} == set(TARGETS)


@pytest.mark.parametrize("path", [_param(p) for p in CASES])
def test_agora_meets_the_bound_on_the_worst_case_found(path: Path) -> None:
    instance, case = load_case(path)
    target = case["target"]
    found = evaluate(
        target, instance.problem(), Settings(time_limit_s=AGORA_TIME_LIMIT_S, exact_time_limit_s=EXACT_TIME_LIMIT_S)
    )
    assert found.ratio is not None, f"{path.name}: the reference no longer counts (no proven optimum, or late)"
    assert found.invalid == [], f"{path.name}: {found.invalid[0]}"
    assert not found.missed, f"{path.name}: agora ({found.agora}) misses a deadline {found.reference} meets"
    assert found.ratio <= bound_of(target) + 1e-9, (
        f"{path.name}: agora ({found.agora}) is {found.ratio:.4f}x {found.reference}, over {bound_of(target)}"
    )
