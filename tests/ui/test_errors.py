"""Every error of the agora app is an answer with a message (JSON, or a page for a browser), never a traceback.

The app is the real one from ``create_app``, served in-process with FastAPI's TestClient; only
Airflow's login is replaced (a fixed user), since these answers come before any right is checked
or do not depend on one. The same cases against a real api-server are in test_access.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from agora_optimizer.errors import InputFileError
from agora_optimizer.ui.app import create_app
from agora_optimizer.ui.auth import current_user

HTML = {"Accept": "text/html"}


class _User:
    def get_id(self) -> str:
        return "1"

    def get_name(self) -> str:
        return "tester"


def _bug() -> Any:
    raise ZeroDivisionError("division by zero in a route")


def _bad_file() -> Any:
    raise InputFileError("plans/etl/current.json", "invalid JSON at line 1 column 2")


@pytest.fixture
def client() -> Iterator[TestClient]:
    app: FastAPI = create_app()
    app.dependency_overrides[current_user] = _User
    app.add_api_route("/api/bug", _bug)
    app.add_api_route("/bug", _bug)
    app.add_api_route("/api/bad-file", _bad_file)
    app.add_api_route("/bad-file", _bad_file)
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client


def test_a_bug_is_a_500_with_a_message_and_the_traceback_only_in_the_log(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    answer = client.get("/api/bug")
    assert answer.status_code == 500
    assert answer.json() == {"detail": "agora failed to answer (ZeroDivisionError); the api-server log has the details"}
    assert answer.headers["cache-control"] == "no-store"  # the security headers are still set
    page = client.get("/bug", headers=HTML)
    assert page.status_code == 500 and "ZeroDivisionError" in page.text and "Traceback" not in page.text
    assert "division by zero in a route" in caplog.text and "Traceback" in caplog.text


def test_an_agora_error_is_a_422_with_its_message(client: TestClient) -> None:
    answer = client.get("/api/bad-file")
    assert answer.status_code == 422
    assert answer.json() == {"detail": "plans/etl/current.json: invalid JSON at line 1 column 2"}
    page = client.get("/bad-file", headers=HTML)
    assert page.status_code == 422 and "invalid JSON at line 1 column 2" in page.text


@pytest.mark.parametrize("dag_id", ["%2e%2e", "%2E", "a%20b", "%0A"])
def test_a_dag_id_airflow_would_refuse_is_a_404_saying_so(client: TestClient, dag_id: str) -> None:
    for path in (f"/api/dags/{dag_id}", f"/api/dags/{dag_id}/history", f"/dags/{dag_id}/gantt.svg"):
        answer = client.get(path)
        assert answer.status_code == 404, path
        assert "is not a valid Airflow DAG id" in answer.json()["detail"], path
    page = client.get(f"/dags/{dag_id}", headers=HTML)
    assert page.status_code == 404 and "is not a valid Airflow DAG id" in page.text


def test_a_path_separator_never_reaches_a_route(client: TestClient) -> None:
    for path in ("/api/dags/a%2Fb", "/api/dags/..%2Fetc", "/dags/a%2Fb%2Fc"):
        answer = client.get(path)
        assert answer.status_code == 404 and answer.json() == {"detail": "Not Found"}, path


def test_a_bad_query_parameter_is_a_422_page_for_a_browser(client: TestClient) -> None:
    answer = client.get("/api/traces", params={"limit": 0})
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["query", "limit"]
    page = client.get("/traces", params={"limit": 0}, headers=HTML)
    assert page.status_code == 422 and "query.limit" in page.text
