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
KNOWN: dict[str, str] = {  # case file name -> why agora misses the bound there, and by how much
    "scale-vs-optimum.json": (
        "171x the proven optimum (balanced under a deadline; cost dominates the score): five tasks, one of which sends "
        "37.6 GB to its child, stay on the dearest type (r2, 3.87 USD an hour); the optimum spreads them over "
        "two cheap types (r0, r3) at 1.7x the makespan. Lease filling moves one task or one whole machine: all "
        "five on one cheap type miss the deadline (t4 alone takes 2,737 s on r0), and each single move first "
        "makes the plan worse"
    ),
    "scale-vs-optimum-two-moves.json": (
        "1.237x the proven optimum (balanced, no deadline; list scheduling and lease filling win at scale, "
        "makespan 1.48x the bound): the optimum moves t0 and t2 together onto a second r2 machine, which lets five "
        "later tasks start 2,100 s sooner; lease filling moves one task or one whole machine at a time, and t0 "
        "alone gains nothing while t2 waits for t4's core"
    ),
}


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
    found = evaluate(target, instance.problem(), Settings(exact_time_limit_s=EXACT_TIME_LIMIT_S))
    assert found.ratio is not None, f"{path.name}: the reference no longer counts (no proven optimum, or late)"
    assert found.invalid == [], f"{path.name}: {found.invalid[0]}"
    assert not found.missed, f"{path.name}: agora ({found.agora}) misses a deadline {found.reference} meets"
    assert found.ratio <= bound_of(target) + 1e-9, (
        f"{path.name}: agora ({found.agora}) is {found.ratio:.4f}x {found.reference}, over {bound_of(target)}"
    )
