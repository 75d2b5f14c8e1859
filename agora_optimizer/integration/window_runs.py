"""The DAG runs that the DAGs' own schedules put in a time window, each with its deadline.

``agora optimize --dags tag:agora --window 24h`` plans these runs jointly on one platform.
:func:`select_dags` picks the DAGs from the DAG folder (``tag:NAME`` or a DAG id), and
:func:`runs_in_window` asks each DAG's timetable, as Airflow's scheduler does with catchup,
for the runs whose ``run_after`` falls in ``[start, start + window)``, within the DAG's
start_date and end_date. Paused state does not matter; a DAG without a time schedule
(``None``, assets, ``@continuous``) has no run there, and :func:`dags_without_runs` says why.

A run's deadline, in seconds after its ``run_after``, comes from ``[agora] deadlines``
(``dag_id=DURATION, ...``), which wins, else from the DAG's ``DeadlineAlert`` (the earliest
of several): ``DAGRUN_LOGICAL_DATE + interval``, ``DAGRUN_QUEUED_AT + interval`` (queued at
``run_after``) and ``FIXED_DATETIME(dt) + interval`` translate; ``AVERAGE_RUNTIME``, a custom
reference or an interval read from a Variable do not, and the run then has no deadline and
the reason in ``deadline_source``. A deadline at or before the run's start is kept as it is; one
further than :data:`~agora_optimizer.model.limits.MAX_TIME_S` after it is none (the reason says so).

The window is bounded (:func:`check_window`): at most :data:`MAX_WINDOW_S` long, starting from
:data:`EARLIEST_START` and ending by :data:`LATEST_END`, so that neither its end, nor a schedule's
look before it, nor a deadline after one of its runs leaves the dates a ``datetime`` holds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.integration.airflow_dag import _first_line, dag_folder
from agora_optimizer.model.limits import MAX_TIME_S

MAX_RUNS = 100_000  # runs of one DAG from where its timetable is asked from to the window's end
_MAX_LOOKBACK = timedelta(days=4096)  # how far before the window a clock-bound schedule is asked from
MAX_WINDOW_S = 366 * 86400.0  # a window's length: a (leap) year
EARLIEST_START = datetime(1970, 1, 1, tzinfo=UTC)  # agora's times are epoch seconds; the look before it stays in range
LATEST_END = datetime(9999, 1, 1, tzinfo=UTC)  # the last year a datetime holds is left for what schedules compute after
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*", re.IGNORECASE)
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class ScheduledRun:
    """One DAG run the DAG's schedule puts in the window.

    ``deadline_s`` is None when no deadline is declared (``deadline_source`` is then empty) or
    when the declared one cannot be known before the run (``deadline_source`` says why: warn).
    """

    dag_id: str
    run_after: datetime  # when the scheduler starts the run (timezone-aware UTC)
    logical_date: datetime | None
    offset_s: float  # run_after - window start, seconds (>= 0)
    deadline_s: float | None  # the run's deadline relative to run_after, seconds (may be <= 0)
    deadline_source: str  # "DeadlineAlert(DAGRUN_LOGICAL_DATE + 6h)", "[agora] deadlines: etl=6h", ""


class WindowError(AgoraError):
    """A DAG selector, a window, a DAG's timetable or ``[agora] deadlines`` cannot be used."""


def _seconds(text: str) -> float | None:
    match = _DURATION.fullmatch(text)
    value = float(match.group(1)) * _UNIT_S[match.group(2).lower()] if match else math.nan
    return value if 0 < value < math.inf else None


def parse_window(text: str) -> float:
    """``--window``: seconds of a duration, ``24h``, ``90m``, ``3600s``, ``1d`` or ``3600`` (seconds); more
    than 0 and at most :data:`MAX_WINDOW_S`."""
    seconds = _seconds(text)
    if seconds is None:
        raise WindowError(f"--window {text!r}: expected a duration > 0 such as 24h, 90m, 3600s, 1d or 3600 (seconds)")
    if seconds > MAX_WINDOW_S:
        raise WindowError(f"--window {text!r}: expected at most {_duration(MAX_WINDOW_S)} ({MAX_WINDOW_S:.0f} s)")
    return seconds


def check_window(start: datetime, window_s: float) -> None:
    """Refuse a window that has no time zone, is not in ``(0, MAX_WINDOW_S]`` seconds long, starts before
    :data:`EARLIEST_START` or ends after :data:`LATEST_END`: a :class:`WindowError` naming the option."""
    if start.tzinfo is None:
        raise WindowError(f"--window-start {start.isoformat()} has no time zone (give it in UTC)")
    if not 0 < window_s <= MAX_WINDOW_S:
        raise WindowError(f"--window of {window_s:g} s: expected a duration > 0, at most {_duration(MAX_WINDOW_S)}")
    if start < EARLIEST_START:
        raise WindowError(f"--window-start {start.isoformat()}: expected {EARLIEST_START.date()} or later")
    if (LATEST_END - start).total_seconds() < window_s:  # in seconds: start + window may be past any datetime
        raise WindowError(
            f"--window-start {start.isoformat()}: the window of {_duration(window_s)} from it ends after "
            f"{LATEST_END.date()}, the latest agora plans for"
        )


def _duration(seconds: float) -> str:
    """``6h``, ``1h30m``, ``45s``, ``-2h``: the shortest spelling of a duration."""
    rest, parts = abs(seconds), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if rest >= size:
            count, rest = divmod(rest, size)
            parts.append(f"{int(count)}{unit}")
    if rest or not parts:
        parts.append(f"{rest:g}s")
    return ("-" if seconds < 0 else "") + "".join(parts)


def select_dags(selectors: Sequence[str], folder: str | Path | None = None) -> list[Any]:
    """The DAGs the selectors name, parsed from the DAG folder, sorted by DAG id, each once.

    A selector is ``tag:NAME`` (every DAG with that tag) or a DAG id; one string may hold
    several, comma-separated. Errors name the selector, the tags or DAGs found, and the files
    that failed to import.
    """
    from airflow.dag_processing.dagbag import DagBag

    wanted = [part.strip() for selector in selectors for part in selector.split(",") if part.strip()]
    if not wanted:
        raise WindowError("no DAG selector given (tag:NAME or a DAG id)")
    folder = Path(folder) if folder is not None else dag_folder()
    if not folder.exists():
        raise WindowError(f"DAG folder {folder} does not exist (set [core] dags_folder or --dag-folder)")
    bag = DagBag(dag_folder=str(folder), safe_mode=False, load_op_links=False)
    broken = "; ".join(f"{path}: {_first_line(error)}" for path, error in sorted(bag.import_errors.items()))
    broken = f"; files that failed to import: {broken}" if broken else ""
    chosen: dict[str, Any] = {}
    for selector in wanted:
        if not selector.startswith("tag:"):
            if selector not in bag.dags:
                known = ", ".join(sorted(bag.dags)) or "none"
                raise WindowError(f"selector '{selector}': no such DAG in {folder} (DAGs found: {known}){broken}")
            chosen[selector] = bag.dags[selector]
            continue
        tag = selector.removeprefix("tag:").strip()
        found = {dag_id: dag for dag_id, dag in bag.dags.items() if tag in (dag.tags or ())}
        if not found:
            tags = ", ".join(sorted({t for dag in bag.dags.values() for t in dag.tags or ()})) or "none"
            raise WindowError(f"selector '{selector}': no DAG in {folder} has tag '{tag}' (tags found: {tags}){broken}")
        chosen.update(found)
    return [chosen[dag_id] for dag_id in sorted(chosen)]


def runs_in_window(dags: Iterable[Any], start: datetime, window_s: float) -> list[ScheduledRun]:
    """Every run the DAGs' timetables start in ``[start, start + window_s)``, by run_after then DAG id."""
    begin, end = _window(start, window_s)
    overrides = _configured_deadlines()
    runs = [
        _scheduled(dag, info, begin, overrides.get(dag.dag_id))
        for dag in dags
        for info in _run_infos(dag, begin, end)
        if begin <= info.run_after < end
    ]
    return sorted(runs, key=lambda run: (run.run_after, run.dag_id))


def dags_without_runs(
    dags: Iterable[Any], runs: Iterable[ScheduledRun], start: datetime, window_s: float
) -> dict[str, str]:
    """The DAGs that have none of ``runs``, each with why its schedule gives none in the window."""
    begin, end = _window(start, window_s)
    with_runs = {run.dag_id for run in runs}
    return {dag.dag_id: _why_no_runs(dag, begin, end) for dag in dags if dag.dag_id not in with_runs}


def _why_no_runs(dag: Any, begin: Any, end: Any) -> str:
    from airflow.timetables.simple import AssetTriggeredTimetable, ContinuousTimetable, NullTimetable

    timetable, (earliest, latest) = _timetable(dag), _bounds(dag)
    if isinstance(timetable, NullTimetable):
        return "schedule None: it runs only when triggered"
    if isinstance(timetable, AssetTriggeredTimetable):
        return f"asset-triggered ({timetable.summary}): it runs when its assets are updated"
    if isinstance(timetable, ContinuousTimetable):
        return "@continuous: each run starts when the one before ends, not at a scheduled time"
    if earliest is None and not _bound_to_clock(timetable):
        return f"schedule {timetable.summary} without a start_date: it counts from the DAG's first parse"
    if earliest is not None and earliest >= end:
        return f"its start_date {earliest.isoformat()} is after the window"
    if latest is not None and latest < begin:
        return f"its end_date {latest.isoformat()} is before the window"
    return f"schedule {timetable.summary} has no run in the window"


def _window(start: datetime, window_s: float) -> tuple[Any, Any]:
    check_window(start, window_s)
    begin = _pendulum(start)
    return begin, begin.add(seconds=window_s)


def _pendulum(moment: datetime | None) -> Any:
    import pendulum

    return None if moment is None else pendulum.instance(moment).in_timezone("UTC")


def _timetable(dag: Any) -> Any:
    """The DAG's core timetable (the scheduler's); of an asset-or-time schedule, its time part."""
    from airflow.serialization.encoders import coerce_to_core_timetable
    from airflow.timetables.assets import AssetOrTimeSchedule

    try:
        timetable = coerce_to_core_timetable(dag.timetable)
    except Exception as exc:  # a custom timetable whose plugin this process does not load, say
        raise WindowError(f"DAG '{dag.dag_id}': its timetable {type(dag.timetable).__name__} fails: {exc}") from exc
    return timetable.timetable if isinstance(timetable, AssetOrTimeSchedule) else timetable


def _bounds(dag: Any) -> tuple[Any, Any]:
    """The earliest and latest time of the DAG's runs, as the scheduler reads its and its tasks' dates."""
    starts = [date for date in (dag.start_date, *(getattr(t, "start_date", None) for t in dag.tasks)) if date]
    ends = [getattr(task, "end_date", None) for task in dag.tasks]
    latest = max([*ends, *([dag.end_date] if dag.end_date else [])]) if ends and all(ends) else dag.end_date
    return _pendulum(min(starts, default=None)), _pendulum(latest)


def _bound_to_clock(timetable: Any) -> bool:
    """Whether the schedule's times do not depend on when it is first asked (cron, events): then it
    may be asked from shortly before the window rather than from its start_date."""
    from airflow.timetables._cron import CronMixin
    from airflow.timetables.events import EventsTimetable
    from airflow.timetables.trigger import MultipleCronTriggerTimetable

    return isinstance(timetable, CronMixin | EventsTimetable | MultipleCronTriggerTimetable)


def _run_infos(dag: Any, begin: Any, end: Any) -> list[Any]:
    """The DagRunInfos of the DAG's scheduled runs before ``end``, from some run before ``begin`` on."""
    from airflow.timetables._delta import DeltaMixin
    from airflow.timetables.simple import ContinuousTimetable

    timetable, (earliest, latest) = _timetable(dag), _bounds(dag)
    if isinstance(timetable, ContinuousTimetable):
        return []
    anchor = begin if latest is None else min(begin, latest)  # the window's runs follow a run before this
    if _bound_to_clock(timetable):
        lookback = max(end - begin, timedelta(days=1))
        while earliest is None or anchor - lookback > earliest:  # further back until a run starts before anchor
            infos = _iterate(dag.dag_id, timetable, anchor - lookback, latest, end)
            if (infos and infos[0].run_after < anchor) or lookback >= _MAX_LOOKBACK:
                return infos
            lookback *= 4
    if earliest is None:  # counted from when the scheduler first saw the DAG: unknown
        return []
    delta = getattr(timetable, "_delta", None)
    if isinstance(timetable, DeltaMixin) and isinstance(delta, timedelta) and delta > timedelta(0):
        steps = (anchor - earliest).total_seconds() // delta.total_seconds() - 1
        earliest = earliest + max(0, int(steps)) * delta  # the same grid, from just before the anchor
    return _iterate(dag.dag_id, timetable, earliest, latest, end)


def _iterate(dag_id: str, timetable: Any, earliest: Any, latest: Any, end: Any) -> list[Any]:
    from airflow.timetables.base import TimeRestriction

    restriction = TimeRestriction(earliest=earliest, latest=latest, catchup=True)
    infos: list[Any] = []
    while len(infos) < MAX_RUNS:
        try:
            info = timetable.next_dagrun_info_v2(last_dagrun_info=infos[-1] if infos else None, restriction=restriction)
        except Exception as exc:
            raise WindowError(f"DAG '{dag_id}': its timetable {timetable.summary} fails: {exc}") from exc
        if info is None or info.run_after >= end or (infos and info.run_after <= infos[-1].run_after):
            return infos
        infos.append(info)
    raise WindowError(f"DAG '{dag_id}': schedule {timetable.summary} has over {MAX_RUNS} runs before the window end")


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else datetime.fromtimestamp(moment.timestamp(), UTC)


def _scheduled(dag: Any, info: Any, begin: Any, override: tuple[float, str] | None) -> ScheduledRun:
    run_after, logical_date = datetime.fromtimestamp(info.run_after.timestamp(), UTC), _utc(info.logical_date)
    deadline_s, source = override if override is not None else _alert_deadline(dag, run_after, logical_date)
    offset_s = (info.run_after - begin).total_seconds()
    return ScheduledRun(dag.dag_id, run_after, logical_date, offset_s, deadline_s, source)


def _configured_deadlines() -> dict[str, tuple[float, str]]:
    """``[agora] deadlines``: ``{dag_id: (seconds, source)}``."""
    deadlines: dict[str, tuple[float, str]] = {}
    for entry in filter(None, (part.strip() for part in settings.get("deadlines").split(","))):
        dag_id, equals, text = (part.strip() for part in entry.partition("="))
        seconds = _seconds(text)
        if not equals or not dag_id or seconds is None or dag_id in deadlines:
            why = "named twice" if dag_id in deadlines else "expected dag_id=DURATION, e.g. etl=6h (90m, 1d, 3600s)"
            raise WindowError(f"[agora] deadlines: {entry!r}: {why}")
        if seconds > MAX_TIME_S:  # a plan's deadline is at most this (agora_optimizer.model.limits)
            raise WindowError(f"[agora] deadlines: {entry!r}: expected at most {MAX_TIME_S:g} s, got {seconds:g} s")
        deadlines[dag_id] = (seconds, f"[agora] deadlines: {dag_id}={text}")
    return deadlines


def _alert_deadline(dag: Any, run_after: datetime, logical_date: datetime | None) -> tuple[float | None, str]:
    """The earliest deadline the DAG's DeadlineAlerts give a run, in seconds after ``run_after``, and its source."""
    found = [_alert_seconds(alert, run_after, logical_date) for alert in getattr(dag, "deadline", None) or []]
    usable = [(seconds, source) for seconds, source in found if seconds is not None]
    return min(usable) if usable else (None, "; ".join(source for _, source in found))


def _alert_seconds(alert: Any, run_after: datetime, logical_date: datetime | None) -> tuple[float | None, str]:
    from airflow.sdk.definitions import deadline as kinds

    reference, interval, why = alert.reference, alert.interval, "the run has no logical date"
    at: datetime | None = None  # the time the interval counts from, for this run
    if isinstance(reference, kinds.DagRunQueuedAtDeadline):
        label, at = "DAGRUN_QUEUED_AT", run_after  # queued as it becomes due
    elif isinstance(reference, kinds.DagRunLogicalDateDeadline):
        label, at = "DAGRUN_LOGICAL_DATE", logical_date
    elif isinstance(reference, kinds.FixedDatetimeDeadline):
        at = datetime.fromtimestamp(reference._datetime.timestamp(), UTC)  # naive: local time, as Airflow reads it
        label = f"FIXED_DATETIME({at.isoformat()})"
    elif isinstance(reference, kinds.AverageRuntimeDeadline):
        label, why = f"AVERAGE_RUNTIME(max_runs={reference.max_runs})", "it depends on past runs' durations"
    else:
        label, why = reference.reference_name, "a custom reference"
    if isinstance(interval, timedelta):
        source = f"DeadlineAlert({label} + {_duration(interval.total_seconds())})"
    else:
        source, at, why = f"DeadlineAlert({label} + Variable {getattr(interval, 'key', '?')!r})", None, "a Variable"
    if at is None:
        return None, f"{source}: {why}, not known before the run"
    seconds = (at - run_after).total_seconds() + interval.total_seconds()  # at + interval may be past any datetime
    if seconds > MAX_TIME_S:
        return None, f"{source}: {seconds:g} s after the run, beyond the {MAX_TIME_S:g} s a plan's deadline may be"
    return seconds, source
