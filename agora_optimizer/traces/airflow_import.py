"""Import task-instance history from a running Airflow 3.3 through its public REST API.

Airflow keeps each try of each task instance: the current try in
``GET /api/v2/dags/{dag_id}/dagRuns/~/taskInstances`` (``~`` for every DAG, paged with
a cursor), and every try, earlier ones included, in ``.../taskInstances/{task_id}/tries``
(``.../{task_id}/{map_index}/tries`` for a mapped task). Tries that ended (success,
failed, up for retry) become :class:`TaskAttempt` rows; tries that did not run to an
end (queued, running, skipped by the scheduler, upstream failed) are not attempts and
are left out. Airflow does not know memory or CPU time: those fields stay empty, the
listener fills them.

Authentication: with a user name, a JWT from ``POST /auth/token`` (Airflow's
SimpleAuthManager and the FAB auth manager both serve it) is sent as a bearer token;
without one, requests go unauthenticated (``simple_auth_manager_all_admins``).

Where the attempt ran comes from the task's ``executor_config`` (``{"agora":
{"resource_type": ..., "backend": ...}}``, which the API serves as ``str(dict)``) or else
a non-default queue name, as in the listener. A record that is malformed or impossible is skipped and reported with a
:class:`TraceRecordError`; the others are kept.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.task_hints import agora_config
from agora_optimizer.model.workflow import shown
from agora_optimizer.traces.records import AttemptState, TaskAttempt, TraceRecordError

PAGE_LIMIT = 100
DEFAULT_TIMEOUT_S = 30.0

# Airflow's task-instance states -> attempt states; a state not listed is not an ended attempt.
STATE_MAPPINGS: dict[str, AttemptState] = {
    "success": "success",
    "failed": "failed",
    "up_for_retry": "failed",
    "restarting": "cancelled",
}


class AirflowApiError(AgoraError):
    """The Airflow API cannot be reached, refuses the credentials, or answers something unexpected."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"Airflow API {url}: {reason}")


@dataclass(frozen=True)
class AirflowImport:
    """What an import found: the attempts, the records skipped as bad, and how many task instances were listed."""

    api_url: str
    attempts: tuple[TaskAttempt, ...]
    skipped: tuple[TraceRecordError, ...]
    task_instances: int
    not_ended: int


def import_airflow_history(
    api_url: str,
    username: str | None = None,
    password: str | None = None,
    dag_id: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> AirflowImport:
    """Every ended try of every task instance (of ``dag_id``, or of every DAG) that the API serves."""
    base = api_url.rstrip("/")
    with httpx.Client(base_url=base, timeout=timeout_s) as client:
        api = _Api(client, base)
        if username:
            api.login(username, password or "")
        attempts: dict[tuple[Any, ...], TaskAttempt] = {}
        skipped: list[TraceRecordError] = []
        listed = not_ended = 0
        for record in api.task_instances(dag_id):
            listed += 1
            if not isinstance(record, dict):
                skipped.append(TraceRecordError(f"{base} record", "*", f"not an object: {record!r:.80}"))
                continue
            tries = [record]
            if _int_or(record.get("try_number"), 1) > 1 or record.get("state") == "up_for_retry":
                tries = api.tries(record) or [record]
            for one in tries:
                if isinstance(one, dict) and STATE_MAPPINGS.get(str(one.get("state"))) is None:
                    not_ended += 1
                    continue
                try:
                    attempt = attempt_from_record(one, source=base)
                except TraceRecordError as exc:
                    skipped.append(exc)
                    continue
                key = (attempt.dag_id, attempt.task_id, attempt.run_id, attempt.map_index, attempt.try_number)
                attempts[key] = attempt
    return AirflowImport(
        api_url=base,
        attempts=tuple(attempts[key] for key in sorted(attempts)),
        skipped=tuple(skipped),
        task_instances=listed,
        not_ended=not_ended,
    )


def attempt_from_record(record: Mapping[str, Any], source: str = "Airflow API") -> TaskAttempt:
    """A ``TaskInstanceResponse`` or ``TaskInstanceHistoryResponse`` as an attempt; raises ``TraceRecordError``."""
    if not isinstance(record, Mapping):
        raise TraceRecordError(f"{source} record", "*", f"not an object but {type(record).__name__}")
    parts = [record.get(name, "?") for name in ("dag_id", "task_id", "dag_run_id", "try_number")]
    key = "{}/{}/{}#{}".format(*(part if isinstance(part, str | int) else shown(part) for part in parts))
    for name in ("dag_id", "task_id", "dag_run_id"):
        if not isinstance(record.get(name), str) or not record[name]:
            raise TraceRecordError(key, name, f"missing or not a string: {shown(record.get(name))}")
    for name in ("try_number", "map_index"):
        value = record.get(name, -1 if name == "map_index" else None)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TraceRecordError(key, name, f"must be an integer, got {shown(value)}")
    state = STATE_MAPPINGS.get(str(record.get("state")))
    if state is None:
        raise TraceRecordError(key, "state", f"{shown(record.get('state'))} is not the state of an ended attempt")
    duration = record.get("duration")
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int | float)):
        raise TraceRecordError(key, "duration", f"must be a number of seconds, got {shown(duration)}")
    resource_type, backend = _resource(record, key)
    return TaskAttempt.create(
        dag_id=record["dag_id"],
        task_id=record["task_id"],
        run_id=record["dag_run_id"],
        try_number=record["try_number"],
        map_index=record.get("map_index", -1),
        operator=str(record.get("operator") or ""),
        resource_type=resource_type,
        backend=backend,
        host=str(record.get("hostname") or ""),
        queued_at=_time(record, "queued_when", key),
        started_at=_time(record, "start_date", key),
        ended_at=_time(record, "end_date", key),
        runtime_s=None if duration is None else float(duration),
        state=state,
    )


class _Api:
    """The few calls the import needs, with errors that name the URL."""

    def __init__(self, client: httpx.Client, base: str) -> None:
        self.client = client
        self.base = base

    def login(self, username: str, password: str) -> None:
        response = self._request("POST", "/auth/token", json={"username": username, "password": password})
        if response.status_code in (401, 403):
            raise AirflowApiError(self.base, f"the credentials of user '{username}' were refused")
        token = self._json(response, "/auth/token").get("access_token")
        if not isinstance(token, str) or not token:
            raise AirflowApiError(self.base, "POST /auth/token answered without an access_token")
        self.client.headers["Authorization"] = f"Bearer {token}"

    def task_instances(self, dag_id: str | None) -> Iterator[dict[str, Any]]:
        path = f"/api/v2/dags/{quote(dag_id, safe='') if dag_id else '~'}/dagRuns/~/taskInstances"
        cursor = ""
        while True:
            response = self._request("GET", path, params={"limit": PAGE_LIMIT, "cursor": cursor})
            if response.status_code == 404 and dag_id:
                raise AirflowApiError(self.base, f"no DAG '{dag_id}'")
            page = self._json(response, path)
            records = page.get("task_instances")
            if not isinstance(records, list):
                raise AirflowApiError(self.base, f"GET {path}: no 'task_instances' list in the answer")
            yield from records
            next_cursor = page.get("next_cursor")
            if not records or not isinstance(next_cursor, str) or not next_cursor or next_cursor == cursor:
                return
            cursor = next_cursor

    def tries(self, record: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every try of one task instance; empty when the API does not know it (any more)."""
        parts = [quote(str(record.get(name, "")), safe="") for name in ("dag_id", "dag_run_id", "task_id")]
        path = f"/api/v2/dags/{parts[0]}/dagRuns/{parts[1]}/taskInstances/{parts[2]}"
        map_index = record.get("map_index", -1)
        if isinstance(map_index, int) and map_index >= 0:
            path += f"/{map_index}"
        path += "/tries"
        response = self._request("GET", path)
        if response.status_code == 404:
            return []
        records = self._json(response, path).get("task_instances")
        return records if isinstance(records, list) else []

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise AirflowApiError(self.base, f"cannot reach the API ({type(exc).__name__}: {exc})") from None

    def _json(self, response: httpx.Response, path: str) -> dict[str, Any]:
        if response.status_code in (401, 403):
            raise AirflowApiError(self.base, f"{path}: not authorised (HTTP {response.status_code}); give --user")
        if response.status_code >= 400:
            raise AirflowApiError(self.base, f"{path}: HTTP {response.status_code}: {response.text[:200]}")
        try:
            body = response.json()
        except ValueError:
            raise AirflowApiError(self.base, f"{path}: the answer is not JSON: {response.text[:200]!r}") from None
        if not isinstance(body, dict):
            raise AirflowApiError(self.base, f"{path}: the answer is not a JSON object")
        return body


def _time(record: Mapping[str, Any], name: str, key: str) -> datetime | None:
    value = record.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TraceRecordError(key, name, f"must be an ISO 8601 time, got {shown(value)}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise TraceRecordError(key, name, f"must be an ISO 8601 time, got {shown(value)}") from None
    if parsed.tzinfo is None:
        raise TraceRecordError(key, name, f"has no time zone: {shown(value)}")
    return parsed


def _resource(record: Mapping[str, Any], key: str) -> tuple[str, str]:
    config = record.get("executor_config")
    if isinstance(config, str):
        config = _literal(config)
    agora = agora_config(config)
    resource_type = agora.get("resource_type") or ""
    backend = agora.get("backend") or ""
    if not isinstance(resource_type, str) or not isinstance(backend, str):
        raise TraceRecordError(key, "executor_config.agora", "resource_type and backend must be strings")
    queue = record.get("queue")
    if not resource_type and isinstance(queue, str) and queue and queue != "default":
        resource_type = queue
    return resource_type, backend


def _literal(text: str) -> Any:
    """Airflow 3.3 serves ``executor_config`` as ``str(dict)`` (a Python literal), not JSON; accept both."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}  # a config holding objects (a Kubernetes pod override): nothing agora wrote


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
