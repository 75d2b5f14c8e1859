"""Simulated annealing over small instances, for the largest ratio of one target (:mod:`.targets`).

A chain starts from a random instance; each step mutates the current one (:func:`.instances.mutate`),
or, one step in :data:`RESTART_EVERY`, starts again from a random instance, so that one chain visits
more than one basin. A step that raises the fitness is always kept, one that lowers it by ``d`` with
probability ``exp(-d / T)``; the temperature falls geometrically from :data:`T_START` to :data:`T_END`
over the run. A run given ``max_seconds`` stops when they pass, with fewer instances searched than asked
(the result says how many). An instance that does not count (no proven optimum, a reference late itself) is kept
only while the chain has nothing better. The worst instance seen is kept, whatever the chain does.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.adversarial.instances import Instance, case_to_dict, mutate, random_instance
from bench.adversarial.targets import Comparison, Settings, evaluate

T_START = 0.05
T_END = 0.002
RESTART_EVERY = 100
PROGRESS_EVERY = 100  # instances between two progress lines on stderr


@dataclass
class TargetResult:
    """What a search of one target found."""

    target: str
    seed: int
    searched: int = 0  # instances evaluated
    counted: int = 0  # of which had a ratio (a proven optimum, a reference within the limits)
    over_bound: int = 0  # counted instances above the target's bound, or missing a deadline, or invalid
    missed: int = 0
    invalid: list[str] = field(default_factory=list)
    worst: Comparison | None = None
    worst_case: dict[str, Any] | None = None  # the worst instance as its case file holds it (pickles)
    best_ratio: float | None = None  # the lowest ratio (below 1: agora beat the reference)
    seconds: float = 0.0


def bound_of(target: str) -> float:
    """The issue's bound: 1.10x the proven optimum; not worse than a baseline by more than 1 %."""
    return 1.10 if target == "scale-vs-optimum" else 1.01


def search(
    target: str,
    instances: int,
    seed: int,
    settings: Settings,
    keep: Callable[[TargetResult], object] | None = None,
    max_seconds: float | None = None,
) -> TargetResult:
    """Search ``instances`` instances, or as many as ``max_seconds`` allow; ``keep(result)`` is called on every
    new worst, so that a run stopped early has kept what it found."""
    rng = random.Random(f"{seed}:{target}")
    result = TargetResult(target, seed)
    started = time.perf_counter()
    current: Instance | None = None
    current_fitness = 0.0
    for step in range(instances):
        if max_seconds is not None and time.perf_counter() - started >= max_seconds:
            break
        candidate = random_instance(rng) if current is None or step % RESTART_EVERY == 0 else mutate(current, rng)
        comparison = evaluate(target, candidate.problem(), settings)
        if _record(result, candidate, comparison) and keep is not None:
            keep(result)
        if (step + 1) % PROGRESS_EVERY == 0:
            worst = result.worst.ratio if result.worst is not None else None
            line = f"{target}: {step + 1} instances, {result.counted} counted, worst {worst}"
            print(line, file=sys.stderr, flush=True)
        temperature = T_START * (T_END / T_START) ** (step / max(instances - 1, 1))
        fitness = comparison.fitness
        if (
            current is None
            or fitness >= current_fitness
            or (fitness > 0 and rng.random() < math.exp((fitness - current_fitness) / temperature))
        ):
            current, current_fitness = candidate, fitness
    result.seconds = time.perf_counter() - started
    return result


def _record(result: TargetResult, instance: Instance, comparison: Comparison) -> bool:
    """Count the comparison in; whether it is the new worst."""
    result.searched += 1
    result.invalid += comparison.invalid[: max(0, 20 - len(result.invalid))]  # the first few are enough to read
    if comparison.ratio is None:
        return False
    result.counted += 1
    result.missed += comparison.missed
    bad = comparison.missed or bool(comparison.invalid) or comparison.ratio > bound_of(result.target) + 1e-9
    result.over_bound += bad
    result.best_ratio = comparison.ratio if result.best_ratio is None else min(result.best_ratio, comparison.ratio)
    if result.worst is None or comparison.fitness > result.worst.fitness:
        result.worst, result.worst_case = comparison, case_to_dict(instance)
        return True
    return False
