"""The runs a window holds (integration/window_runs.py): DAG files parsed by Airflow 3.3's own DagBag, in this process.

Every expected run time below is worked out from the schedule and the window by hand or by
plain ``datetime`` arithmetic, not by asking Airflow again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.integration.window_runs import (  # imports airflow only when asked
    LATEST_END,
    MAX_WINDOW_S,
    ScheduledRun,
    WindowError,
    dags_without_runs,
    parse_window,
    runs_in_window,
    select_dags,
)
from tests.airflow_home import private_airflow_home

private_airflow_home("agora-window-tests-")  # before the first import of airflow

START = datetime(2026, 12, 3, tzinfo=UTC)  # the window's start in most tests
DAY_S = 86400.0
HOUR = timedelta(hours=1)
FIXED = datetime(2026, 12, 3, 12, tzinfo=UTC)  # FIXED_DATETIME's reference

DAGS = """
from datetime import datetime, timedelta, timezone

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import (
    DAG, Asset, BaseDeadlineReference, CronDataIntervalTimetable, DeadlineAlert, DeadlineReference, SyncCallback,
)
from airflow.sdk.definitions.deadline import VariableInterval


def notify(**kwargs):
    pass


class EndOfQuarter(BaseDeadlineReference):  # a custom reference: evaluated by the scheduler only
    pass


def alert(reference, interval):
    return DeadlineAlert(reference=reference, interval=interval, callback=SyncCallback(notify))


LONG_AGO = datetime(2020, 1, 1)
FIXED = datetime(2026, 12, 3, 12, tzinfo=timezone.utc)
HOUR, MINUTE = timedelta(hours=1), timedelta(minutes=1)
ref = DeadlineReference
SPECS = {
    "hourly": dict(schedule="0 * * * *", start_date=LONG_AGO, tags=["agora"]),
    "daily": dict(schedule="@daily", start_date=LONG_AGO, tags=["agora", "nightly"]),
    "every_5h": dict(schedule=timedelta(hours=5), start_date=datetime(2026, 11, 1, 0, 17)),
    "manual": dict(schedule=None, start_date=LONG_AGO, tags=["agora"]),
    "on_asset": dict(schedule=[Asset("s3://bucket/table")], start_date=LONG_AGO),
    "not_yet": dict(schedule="@hourly", start_date=datetime(2026, 12, 5), tags=["nightly"]),
    "ended": dict(schedule="@hourly", start_date=LONG_AGO, end_date=datetime(2026, 11, 1)),
    "interval_ended": dict(
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
        start_date=LONG_AGO, end_date=datetime(2026, 12, 2, 23),
    ),
    "by_logical_date": dict(
        schedule="0 * * * *", start_date=LONG_AGO, deadline=alert(ref.DAGRUN_LOGICAL_DATE, timedelta(hours=6)),
    ),
    "by_logical_date_interval": dict(
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"), start_date=LONG_AGO,
        deadline=alert(ref.DAGRUN_LOGICAL_DATE, timedelta(hours=6)),
    ),
    "by_queued_at": dict(schedule="@daily", start_date=LONG_AGO, deadline=alert(ref.DAGRUN_QUEUED_AT, 90 * MINUTE)),
    "by_fixed": dict(schedule="0 */6 * * *", start_date=LONG_AGO, deadline=alert(ref.FIXED_DATETIME(FIXED), HOUR)),
    "by_average": dict(schedule="@daily", start_date=LONG_AGO, deadline=alert(ref.AVERAGE_RUNTIME(), HOUR)),
    "by_custom": dict(schedule="@daily", start_date=LONG_AGO, deadline=alert(EndOfQuarter(), HOUR)),
    "by_variable": dict(
        schedule="@daily", start_date=LONG_AGO, deadline=alert(ref.DAGRUN_QUEUED_AT, VariableInterval("deadline_s")),
    ),
    "by_far_future": dict(  # Airflow takes any timedelta: 999999999 days after the run is past year 9999
        schedule="@daily", start_date=LONG_AGO, deadline=alert(ref.DAGRUN_QUEUED_AT, timedelta(days=999999999)),
    ),
    "by_several": dict(
        schedule="@daily", start_date=LONG_AGO,
        deadline=[
            alert(ref.AVERAGE_RUNTIME(), timedelta(minutes=1)),
            alert(ref.DAGRUN_QUEUED_AT, timedelta(hours=3)),
            alert(ref.DAGRUN_LOGICAL_DATE, timedelta(hours=2)),
        ],
    ),
}
for dag_id, arguments in SPECS.items():
    with DAG(dag_id, catchup=False, **arguments):
        EmptyOperator(task_id="work")
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dags")
    (path / "window_dags.py").write_text(DAGS)
    (path / "broken.py").write_text("from airflow.sdk import DAG\nraise RuntimeError('this file is broken')\n")
    return path


@pytest.fixture(scope="module")
def dags(folder: Path) -> dict[str, Any]:
    """Every DAG of the folder, by id, parsed once."""
    every = "hourly,daily,every_5h,manual,on_asset,not_yet,ended,interval_ended"
    every += ",by_logical_date,by_logical_date_interval,by_queued_at,by_fixed,by_average,by_custom,by_variable"
    every += ",by_several,by_far_future"
    return {dag.dag_id: dag for dag in select_dags([every], folder)}


@pytest.fixture(autouse=True)
def no_configured_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__AGORA__DEADLINES", raising=False)


def runs(dags: dict[str, Any], *dag_ids: str, start: datetime = START, window_s: float = DAY_S) -> list[ScheduledRun]:
    return runs_in_window([dags[dag_id] for dag_id in dag_ids], start, window_s)


# --- which DAGs


def test_a_tag_selects_every_dag_with_it_and_ids_add_to_it_each_dag_once(folder: Path) -> None:
    chosen = select_dags(["tag:agora", "daily", "by_fixed,hourly"], folder)
    assert [dag.dag_id for dag in chosen] == ["by_fixed", "daily", "hourly", "manual"]
    assert [dag.dag_id for dag in select_dags(["tag:nightly"], folder)] == ["daily", "not_yet"]
    assert [dag.dag_id for dag in select_dags(["every_5h"], folder)] == ["every_5h"]


def test_an_unknown_tag_or_id_is_an_error_that_names_it_what_there_is_and_the_broken_files(folder: Path) -> None:
    with pytest.raises(WindowError) as tag:
        select_dags(["tag:agora", "tag:weekly"], folder)
    message = str(tag.value)
    assert "selector 'tag:weekly'" in message and "has tag 'weekly'" in message
    assert "(tags found: agora, nightly)" in message
    assert "broken.py" in message and "this file is broken" in message
    with pytest.raises(WindowError) as dag_id:
        select_dags(["daily", "hourli"], folder)
    message = str(dag_id.value)
    assert "selector 'hourli'" in message and "by_average, by_custom" in message and "hourly" in message
    assert "broken.py" in message
    with pytest.raises(WindowError, match="no DAG selector"):
        select_dags([" ", ""], folder)
    with pytest.raises(WindowError, match="does not exist"):
        select_dags(["daily"], folder / "missing")


# --- which runs


def test_an_hourly_cron_dag_has_24_runs_in_24_hours_one_an_hour(dags: dict[str, Any]) -> None:
    found = runs(dags, "hourly")
    assert [run.offset_s for run in found] == [3600.0 * hour for hour in range(24)]
    assert [run.run_after for run in found] == [START + hour * HOUR for hour in range(24)]
    assert all(run.run_after.utcoffset() == timedelta(0) for run in found)
    assert all(run.logical_date == run.run_after for run in found)  # a cron trigger: the run's logical date
    assert all(run.deadline_s is None and run.deadline_source == "" for run in found)
    shifted = runs(dags, "hourly", start=START + timedelta(minutes=30))  # the window need not start on the hour
    assert [run.offset_s for run in shifted] == [1800.0 + 3600.0 * hour for hour in range(24)]


def test_a_daily_dag_has_one_run_a_day_at_midnight(dags: dict[str, Any]) -> None:
    (run,) = runs(dags, "daily")
    assert (run.run_after, run.offset_s) == (START, 0.0)
    (later,) = runs(dags, "daily", start=START + 6 * HOUR)
    assert (later.run_after, later.offset_s) == (START + 24 * HOUR, 18 * 3600.0)
    assert len(runs(dags, "daily", window_s=3 * DAY_S)) == 3
    assert runs(dags, "daily", start=START + HOUR, window_s=3600.0) == []


def test_a_timedelta_schedule_keeps_the_grid_of_its_start_date(dags: dict[str, Any]) -> None:
    first = datetime(2026, 11, 1, 0, 17, tzinfo=UTC)  # every 5 h from here on
    expected = [first + k * 5 * HOUR for k in range(400)]
    expected = [moment for moment in expected if START <= moment < START + timedelta(days=2)]
    assert [run.run_after for run in runs(dags, "every_5h", window_s=2 * DAY_S)] == expected
    assert len(expected) == 10


def test_the_window_is_half_open_and_runs_come_by_time_then_dag(dags: dict[str, Any]) -> None:
    found = runs(dags, "hourly", "daily", start=START - HOUR, window_s=3600.0)  # [23:00, 00:00): midnight is out
    assert [(run.dag_id, run.run_after) for run in found] == [("hourly", START - HOUR)]
    both = runs(dags, "hourly", "daily", window_s=2 * 3600.0)
    assert [(run.dag_id, run.offset_s) for run in both] == [("daily", 0.0), ("hourly", 0.0), ("hourly", 3600.0)]


def test_dags_without_a_run_in_the_window_and_why(dags: dict[str, Any]) -> None:
    ids = ["hourly", "manual", "on_asset", "not_yet", "ended"]
    found = runs(dags, *ids)
    assert {run.dag_id for run in found} == {"hourly"}
    why = dags_without_runs([dags[dag_id] for dag_id in ids], found, START, DAY_S)
    assert set(why) == {"manual", "on_asset", "not_yet", "ended"}
    assert why["manual"].startswith("schedule None")
    assert why["on_asset"].startswith("asset-triggered")
    assert why["not_yet"] == "its start_date 2026-12-05T00:00:00+00:00 is after the window"
    assert why["ended"] == "its end_date 2026-11-01T00:00:00+00:00 is before the window"
    # the window that reaches its start_date holds its runs: from 2026-12-05 00:00 on, one an hour
    later = runs(dags, "not_yet", start=START + 2 * 24 * HOUR - 3 * HOUR, window_s=6 * 3600.0)
    assert [run.offset_s for run in later] == [3 * 3600.0 + 3600.0 * hour for hour in range(3)]


def test_a_data_interval_ends_after_its_logical_date_so_its_last_run_may_follow_the_end_date(
    dags: dict[str, Any],
) -> None:
    # end_date 2026-12-02 23:00: the last interval starts at 2026-12-02 00:00 and runs when it ends, at 12-03 00:00
    (run,) = runs(dags, "interval_ended", start=START - 12 * HOUR, window_s=2 * DAY_S)
    assert (run.run_after, run.logical_date) == (START, START - 24 * HOUR)


# --- deadlines


def test_a_deadline_after_the_logical_date_counts_from_it(dags: dict[str, Any]) -> None:
    found = runs(dags, "by_logical_date")
    assert len(found) == 24
    assert {(run.deadline_s, run.deadline_source) for run in found} == {
        (6 * 3600.0, "DeadlineAlert(DAGRUN_LOGICAL_DATE + 6h)")
    }
    # a data interval's logical date is a day before its run: 6 h after it is 18 h before the run starts, kept
    (daily,) = runs(dags, "by_logical_date_interval")
    assert daily.logical_date == daily.run_after - 24 * HOUR
    assert daily.deadline_s == -18 * 3600.0


def test_a_deadline_after_queued_at_counts_from_the_run_start(dags: dict[str, Any]) -> None:
    (run,) = runs(dags, "by_queued_at")
    assert (run.deadline_s, run.deadline_source) == (5400.0, "DeadlineAlert(DAGRUN_QUEUED_AT + 1h30m)")


def test_a_fixed_deadline_is_the_same_moment_for_every_run(dags: dict[str, Any]) -> None:
    found = runs(dags, "by_fixed")
    assert [run.offset_s for run in found] == [0.0, 6 * 3600.0, 12 * 3600.0, 18 * 3600.0]
    assert [run.deadline_s for run in found] == [13 * 3600.0, 7 * 3600.0, 3600.0, -5 * 3600.0]  # 13:00 less each start
    assert all(run.run_after + timedelta(seconds=run.deadline_s or 0) == FIXED + HOUR for run in found)
    assert found[0].deadline_source == "DeadlineAlert(FIXED_DATETIME(2026-12-03T12:00:00+00:00) + 1h)"


@pytest.mark.parametrize(
    ("dag_id", "named"),
    [
        ("by_average", "DeadlineAlert(AVERAGE_RUNTIME(max_runs=10) + 1h): it depends on past runs' durations"),
        ("by_custom", "DeadlineAlert(EndOfQuarter + 1h): a custom reference"),
        ("by_variable", "DeadlineAlert(DAGRUN_QUEUED_AT + Variable 'deadline_s'): a Variable"),
    ],
)
def test_a_deadline_known_only_at_run_time_is_none_and_says_why(dags: dict[str, Any], dag_id: str, named: str) -> None:
    (run,) = runs(dags, dag_id)
    assert run.deadline_s is None
    assert run.deadline_source == f"{named}, not known before the run"


def test_a_deadline_past_what_a_plan_holds_is_none_and_says_why(dags: dict[str, Any]) -> None:
    """Its run_after plus the interval once ended in an OverflowError traceback (past year 9999)."""
    (run,) = runs(dags, "by_far_future")
    assert run.deadline_s is None
    assert run.deadline_source == (
        "DeadlineAlert(DAGRUN_QUEUED_AT + 999999999d): 8.64e+13 s after the run, beyond the 1e+12 s a plan's "
        "deadline may be"
    )


def test_of_several_deadlines_the_earliest_known_one_counts(dags: dict[str, Any]) -> None:
    (run,) = runs(dags, "by_several")  # AVERAGE_RUNTIME + 1 min is unknown; 2 h after the logical date is first
    assert (run.deadline_s, run.deadline_source) == (7200.0, "DeadlineAlert(DAGRUN_LOGICAL_DATE + 2h)")


def test_agora_deadlines_in_the_config_win_over_the_deadline_alert(
    dags: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__AGORA__DEADLINES", " by_logical_date = 45m, daily=1d,by_average=3600 , gone=2h")
    found = runs(dags, "by_logical_date", "daily", "by_average", "hourly")
    by_dag = {run.dag_id: (run.deadline_s, run.deadline_source) for run in found}
    assert by_dag["by_logical_date"] == (2700.0, "[agora] deadlines: by_logical_date=45m")
    assert by_dag["daily"] == (DAY_S, "[agora] deadlines: daily=1d")
    assert by_dag["by_average"] == (3600.0, "[agora] deadlines: by_average=3600")
    assert by_dag["hourly"] == (None, "")  # not named: no deadline


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        ("daily", "'daily'"),
        ("daily=soon", "'daily=soon'"),
        ("=2h", "'=2h'"),
        ("a=1h,a=2h", "named twice"),
        ("daily=99999999999d", "'daily=99999999999d': expected at most 1e+12 s, got 8.64e+15 s"),  # was planned with
    ],
)
def test_a_malformed_agora_deadlines_entry_is_named(
    dags: dict[str, Any], monkeypatch: pytest.MonkeyPatch, value: str, wrong: str
) -> None:
    monkeypatch.setenv("AIRFLOW__AGORA__DEADLINES", value)
    with pytest.raises(WindowError, match=r"\[agora\] deadlines") as error:
        runs(dags, "daily")
    assert wrong in str(error.value)


# --- the window


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", DAY_S), ("90m", 5400.0), ("3600s", 3600.0), ("1d", DAY_S), ("3600", 3600.0), (" 1.5H ", 5400.0)],
)
def test_a_window_is_read_in_seconds(text: str, seconds: float) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "24 hours", "1w", "-1h", "0", "0h", "1e999", "nan", "2h30m"])
def test_a_window_that_is_no_duration_is_refused_with_what_is_expected(text: str) -> None:
    with pytest.raises(WindowError, match="expected a duration > 0 such as 24h") as error:
        parse_window(text)
    assert repr(text) in str(error.value)


@pytest.mark.parametrize("text", ["367d", "99999999d", "9" * 40 + "d", "31622401"])
def test_a_window_longer_than_a_year_is_refused_naming_the_option(text: str) -> None:
    """``--window 99999999d`` once ended in an OverflowError traceback (its end past year 9999)."""
    with pytest.raises(WindowError) as error:
        parse_window(text)
    assert str(error.value) == f"--window {text!r}: expected at most 366d (31622400 s)"
    assert parse_window("366d") == MAX_WINDOW_S


@pytest.mark.parametrize(
    ("start", "window_s", "message"),
    [
        (datetime(9999, 12, 31, tzinfo=UTC), DAY_S, "the window of 1d from it ends after 9999-01-01"),
        (datetime(9998, 12, 31, 0, 0, 1, tzinfo=UTC), DAY_S, "the window of 1d from it ends after 9999-01-01"),
        (datetime(2026, 12, 3, tzinfo=UTC), 1e12, "--window of 1e+12 s: expected a duration > 0, at most 366d"),
        (datetime(1, 1, 1, tzinfo=UTC), DAY_S, "expected 1970-01-01 or later"),
    ],
)
def test_a_window_past_the_dates_a_datetime_holds_is_refused_naming_the_option(
    dags: dict[str, Any], start: datetime, window_s: float, message: str
) -> None:
    """A window ending past year 9999 or starting in year 1 once ended in an OverflowError traceback."""
    with pytest.raises(WindowError, match=r"^--window") as error:
        runs(dags, "daily", start=start, window_s=window_s)
    assert message in str(error.value)


def test_the_last_window_agora_plans_for_still_has_its_runs(dags: dict[str, Any]) -> None:
    (run,) = runs(dags, "daily", start=LATEST_END - 24 * HOUR, window_s=DAY_S)
    assert run.run_after == LATEST_END - 24 * HOUR


def test_a_window_needs_a_time_zone_and_a_length(dags: dict[str, Any]) -> None:
    with pytest.raises(WindowError, match="no time zone"):
        runs(dags, "daily", start=datetime(2026, 12, 3))
    with pytest.raises(WindowError, match="expected a duration > 0"):
        runs(dags, "daily", window_s=0.0)
