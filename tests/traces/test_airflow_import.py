"""The REST importer's handling of what an API can answer: records good and bad, servers down or confused.

The records follow the ``TaskInstanceResponse`` schema of Airflow 3.3's OpenAPI
document; the real API server is exercised in test_airflow_traces.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from agora_optimizer.traces.airflow_import import AirflowApiError, attempt_from_record, import_airflow_history
from agora_optimizer.traces.records import TraceRecordError


def record(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "01a22cd4-bacd-774f-895a-09ba1ef89a5f",
        "task_id": "align",
        "dag_id": "genome",
        "dag_run_id": "manual__2026-03-01T12:00:00+00:00",
        "map_index": -1,
        "start_date": "2026-03-01T12:00:05.5Z",
        "end_date": "2026-03-01T12:01:05.5Z",
        "duration": 60.0,
        "state": "success",
        "try_number": 1,
        "hostname": "worker-1",
        "queue": "default",
        "operator": "BashOperator",
        "queued_when": "2026-03-01T12:00:01Z",
        "executor_config": "{}",
    }
    base.update(overrides)
    return base


def test_a_record_becomes_an_attempt() -> None:
    attempt = attempt_from_record(record(map_index=4, try_number=2))
    assert (attempt.dag_id, attempt.task_id, attempt.run_id) == ("genome", "align", "manual__2026-03-01T12:00:00+00:00")
    assert (attempt.map_index, attempt.try_number, attempt.state) == (4, 2, "success")
    assert (attempt.operator, attempt.host, attempt.runtime_s) == ("BashOperator", "worker-1", 60.0)
    assert attempt.started_at is not None and attempt.started_at.tzinfo is not None
    assert attempt.queued_at is not None and attempt.queued_at < attempt.started_at
    assert (attempt.resource_type, attempt.backend) == ("", "")


@pytest.mark.parametrize(
    ("config", "queue", "expected"),
    [
        ("{'agora': {'resource_type': 'c7i.xlarge', 'backend': 'aws'}}", "default", ("c7i.xlarge", "aws")),  # str(dict)
        ('{"agora": {"resource_type": "slurm:gpu", "backend": "slurm"}}', "default", ("slurm:gpu", "slurm")),  # JSON
        ("{}", "local:big", ("local:big", "")),
        ("{'pod_override': <V1Pod object>}", "default", ("", "")),  # not a literal: nothing agora wrote
    ],
)
def test_where_it_ran_comes_from_executor_config_then_queue(config: str, queue: str, expected: tuple[str, str]) -> None:
    attempt = attempt_from_record(record(executor_config=config, queue=queue))
    assert (attempt.resource_type, attempt.backend) == expected


def test_airflow_states_map_to_attempt_states() -> None:
    assert attempt_from_record(record(state="up_for_retry")).state == "failed"
    assert attempt_from_record(record(state="failed")).state == "failed"
    assert attempt_from_record(record(state="restarting")).state == "cancelled"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"end_date": "2026-03-01T11:00:00Z", "duration": None}, "ended_at"),
        ({"duration": -3.0}, "runtime_s"),
        ({"dag_id": None}, "dag_id"),
        ({"dag_run_id": ""}, "dag_run_id"),
        ({"try_number": "1"}, "try_number"),
        ({"map_index": None}, "map_index"),
        ({"state": "running"}, "state"),
        ({"start_date": "yesterday"}, "start_date"),
        ({"start_date": "2026-03-01T12:00:05"}, "start_date"),  # no zone
        ({"duration": "60"}, "duration"),
        ({"executor_config": "{'agora': {'resource_type': 7}}"}, "executor_config.agora"),
    ],
)
def test_a_bad_record_is_a_trace_record_error_naming_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(TraceRecordError) as caught:
        attempt_from_record(record(**overrides))
    assert caught.value.field == field


def test_a_record_that_is_not_an_object_is_a_trace_record_error() -> None:
    with pytest.raises(TraceRecordError, match="not an object"):
        attempt_from_record(["genome", "align"])  # type: ignore[arg-type]


def test_an_api_that_is_down_is_a_clear_error_naming_the_url() -> None:
    with pytest.raises(AirflowApiError, match=r"^Airflow API http://127\.0\.0\.1:1: cannot reach the API"):
        import_airflow_history("http://127.0.0.1:1/", "admin", "pw", timeout_s=5)


def test_an_answer_that_is_not_json_is_a_clear_error(http_server: tuple[str, dict[str, tuple[int, str]]]) -> None:
    url, answers = http_server
    answers["/api/v2/"] = (200, "<html>a proxy login page</html>")
    with pytest.raises(AirflowApiError, match=r"the answer is not JSON: '<html>a proxy login page"):
        import_airflow_history(url)


def test_a_server_error_is_a_clear_error(http_server: tuple[str, dict[str, tuple[int, str]]]) -> None:
    url, answers = http_server
    answers["/auth/token"] = (201, '{"access_token": "t"}')
    answers["/api/v2/"] = (500, '{"detail": "database is locked"}')
    with pytest.raises(AirflowApiError, match=r"HTTP 500: .*database is locked"):
        import_airflow_history(url, "admin", "pw")


def test_an_empty_history_imports_nothing_and_says_so(http_server: tuple[str, dict[str, tuple[int, str]]]) -> None:
    url, answers = http_server
    answers["/api/v2/"] = (200, '{"task_instances": [], "total_entries": 0, "next_cursor": null}')
    found = import_airflow_history(url)
    assert (found.attempts, found.skipped, found.task_instances) == ((), (), 0)


def test_bad_records_are_skipped_and_the_good_ones_kept(http_server: tuple[str, dict[str, tuple[int, str]]]) -> None:
    import json

    url, answers = http_server
    good = record()
    backwards = record(task_id="backwards", end_date="2026-03-01T11:00:00Z", duration=None)
    running = record(task_id="running", state="running")
    page = {"task_instances": [good, backwards, running, "junk"], "next_cursor": None}
    answers["/api/v2/"] = (200, json.dumps(page))
    found = import_airflow_history(url)
    assert [a.task_id for a in found.attempts] == ["align"]
    assert [problem.field for problem in found.skipped] == ["ended_at", "*"]
    assert (found.task_instances, found.not_ended) == (4, 1)


@pytest.mark.parametrize(
    "overrides",
    [
        {"dag_id": ["d"] * 50_000},
        {"state": "x" * 50_000},
        {"duration": {"seconds": list(range(50_000))}},
        {"start_date": "y" * 50_000},
    ],
    ids=["dag_id", "state", "duration", "start_date"],
)
def test_a_bad_value_is_quoted_short_on_one_line(overrides: dict[str, Any]) -> None:
    with pytest.raises(TraceRecordError) as caught:
        attempt_from_record(record(**overrides))
    assert len(str(caught.value)) < 400
