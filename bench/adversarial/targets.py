"""What the adversarial search compares: agora against the proven optimum, and against each baseline.

- ``scale-vs-optimum``: agora at the settings it plans a large workflow with (the portfolio's stages
  that apply at :data:`SCALE_TASKS` tasks: no exact engine, no local search; the same time limit)
  against the optimum the exact engines prove (CP-SAT, then the MILP if CP-SAT did not prove one).
  An instance whose optimum is not proven within the limit is not counted.
- ``vs-<baseline>``: agora as it plans a small workflow (the whole portfolio) against one baseline:
  HEFT (which is memory-aware already in the sense of arXiv 2503.22365's HEFTM: a task only goes to
  a machine whose memory holds it beside the tasks running there at every instant of its run),
  PEFT, the one-type default, the elastic per-task lease, and Kulagina et al.'s partitioner.

The ratio is agora's objective value over the reference's (:meth:`Problem.score`: what the portfolio
minimises), counted only where the reference meets the deadline; agora missing a deadline that the
reference meets is a finding whatever the ratio, and so is any plan the checker refuses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.elastic_lease import ElasticLeaseEngine
from agora_optimizer.engines.exact.cpsat.engine import CpSatEngine
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.engines.heft import HeftEngine
from agora_optimizer.engines.one_type_default import OneTypeDefaultEngine
from agora_optimizer.engines.partition.icpp24 import PartitionEngine
from agora_optimizer.engines.peft import PeftEngine
from agora_optimizer.optimize.optimize import build_plan
from agora_optimizer.optimize.portfolio import Stage, default_stages, run_portfolio
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.validate import validate_plan

SCALE_TASKS = 10_000  # the stages of a workflow this large: the 10,000-task benchmarks
BASELINES: dict[str, type[Engine]] = {
    "heft": HeftEngine,
    "peft": PeftEngine,
    "one-type-default": OneTypeDefaultEngine,
    "elastic-lease": ElasticLeaseEngine,
    "partition": PartitionEngine,
}
LIMIT_RULES = ("deadline", "budget")  # the checker's rules on the objective's limits, not on the schedule
TARGETS = ("scale-vs-optimum", *(f"vs-{name}" for name in BASELINES))


@dataclass(frozen=True)
class Settings:
    time_limit_s: float = 2.0  # agora's (and each baseline's) time limit
    exact_time_limit_s: float = 5.0  # each exact engine's, for the proven optimum
    scale_tasks: int = SCALE_TASKS


@dataclass
class Comparison:
    """One instance's verdict. ``ratio`` is None when the instance does not count (no proven optimum, or
    a reference that misses the deadline)."""

    ratio: float | None
    missed: bool = False  # agora misses a deadline (or budget) the reference meets
    invalid: list[str] = field(default_factory=list)  # the checker's findings, "<method>: <violation>"
    agora: str = ""
    reference: str = ""
    seconds: float = 0.0

    @property
    def fitness(self) -> float:
        """What the search maximises: the ratio, with a missed deadline or an invalid plan above any ratio."""
        if self.ratio is None:
            return 0.0
        return self.ratio + 10.0 * (self.missed or bool(self.invalid))


def scale_stages(scale_tasks: int) -> list[Stage]:
    """The portfolio's stages that would run on a workflow of ``scale_tasks`` tasks."""
    return [s for s in default_stages() if s.max_tasks is None or scale_tasks <= s.max_tasks]


def violations(problem: Problem, result: EngineResult) -> list[str]:
    """The checker's verdict on a result, as the plan file would state it, and any start before a release.

    A missed deadline or budget is left out: it is no fault of the plan's rules, and :func:`compare`
    weighs it (a baseline may well miss a deadline)."""
    plan = build_plan(
        problem.workflow,
        problem.catalog,
        problem.objective,
        "adversarial",
        problem.written(result.assignments),
        result.method,
        0.0,
    )
    checked = validate_plan(plan, problem.workflow, problem.catalog)
    found = [f"{result.method}: {v}" for v in checked if v.rule not in LIMIT_RULES]
    found += [
        f"{result.method}: task '{a.task}' starts before its release" for a in problem.early_starts(result.assignments)
    ]
    return found


def proven_optimum(problem: Problem, time_limit_s: float) -> EngineResult | None:
    """A plan proven optimal by CP-SAT or, failing that, the MILP, each cold; None when neither proves one."""
    for engine in (CpSatEngine(), MilpEngine()):
        result = engine.solve(problem, time_limit_s)
        if result is not None and result.status == "optimal":
            return result
    return None


def compare(problem: Problem, agora: EngineResult, reference: EngineResult) -> Comparison:
    invalid = violations(problem, agora) + violations(problem, reference)
    agora_rank = problem.rank(*problem.evaluate(agora.assignments))
    reference_rank = problem.rank(*problem.evaluate(reference.assignments))
    if reference_rank[0] > 0:
        return Comparison(None, invalid=invalid, agora=agora.method, reference=reference.method)
    return Comparison(
        agora_rank[1] / max(reference_rank[1], 1e-12),
        missed=agora_rank[0] > 0,
        invalid=invalid,
        agora=agora.method,
        reference=reference.method,
    )


def evaluate(target: str, problem: Problem, settings: Settings) -> Comparison:
    """The comparison ``target`` names, on one problem, timed."""
    started = time.perf_counter()
    if target == "scale-vs-optimum":
        optimum = proven_optimum(problem, settings.exact_time_limit_s)
        if optimum is None:
            return Comparison(None, seconds=time.perf_counter() - started)
        agora = run_portfolio(problem, settings.time_limit_s, scale_stages(settings.scale_tasks)).best
        comparison = compare(problem, agora, optimum)
    else:
        baseline = BASELINES[target.removeprefix("vs-")]()
        reference = baseline.solve(problem, settings.time_limit_s)
        if reference is None:  # the baseline does not apply (e.g. no one type fits every task)
            return Comparison(None, seconds=time.perf_counter() - started)
        agora = run_portfolio(problem, settings.time_limit_s).best
        comparison = compare(problem, agora, reference)
    comparison.seconds = time.perf_counter() - started
    return comparison
