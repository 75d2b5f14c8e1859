"""What a re-plan says of a deadline at risk: how late the run would end, and what it moved to keep it."""

from __future__ import annotations

from collections.abc import Mapping

from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.replan_schedule import Schedule

MOVES_NAMED = 5  # tasks a deadline note names


def deadline_note(
    deadline_s: float,
    before: Schedule,
    after: Schedule,
    planned: Mapping[str, Assignment],
    catalog: Catalog,
    tried: int,
) -> str:
    """In words: the run at risk of missing ``deadline_s`` as re-planned to keep its cost (``before``), and
    what the schedule chosen (``after``, of ``tried`` schedules with more weight on time) moved to keep it."""
    at_risk = f"deadline at risk: the run ends at {before[1]:.1f} s, past its deadline {deadline_s:.1f} s"
    if after is before and not tried:
        return f"{at_risk}; the re-plan's time limit left no time to look for faster types or more machines"
    if after is before:
        return f"{at_risk}; no faster type or further machine within the catalog's counts and budget keeps it"
    was = {a.task: a for a in before[0]}
    speed = {r.name: r.speed for r in catalog.resources}
    faster = [a for a in after[0] if a.task in was and speed[a.resource] > speed[was[a.task].resource]]
    named = ", ".join(f"{a.task} {was[a.task].resource} -> {a.resource}" for a in faster[:MOVES_NAMED])
    more = f" and {len(faster) - MOVES_NAMED} more" if len(faster) > MOVES_NAMED else ""
    machines_before = {a.machine for a in before[0]} | {a.machine for a in planned.values()}
    added = sorted({a.machine for a in after[0]} - machines_before)
    kept = "keeps it" if after[1] <= deadline_s + TIME_TOLERANCE_S else "comes closer"
    moved = "1 task moved to a faster type" if len(faster) == 1 else f"{len(faster)} tasks moved to faster types"
    moves = [f"{moved} ({named}{more})"] if faster else []
    more_machines = f" and {len(added) - MOVES_NAMED} more" if len(added) > MOVES_NAMED else ""
    machines = "1 more machine" if len(added) == 1 else f"{len(added)} more machines"
    moves += [f"{machines} ({', '.join(added[:MOVES_NAMED])}{more_machines})"] if added else []
    return (
        f"{at_risk}; {', '.join(moves) or 'tasks moved to other machines'}"
        + f"; it now ends at {after[1]:.1f} s ({kept}) for {after[2]:.4f} USD, {after[2] - before[2]:+.4f} USD"
    )
