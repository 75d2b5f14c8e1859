"""The agora view in a real Airflow api-server: Airflow's login on every route, per-DAG rights, escaping, paging.

Users and rights come from the FAB auth manager (see conftest.py): ``admin`` may do anything,
``reader`` may read agora_example_etl, ``editor`` may also edit it, ``outsider`` may read and
edit agora_other only.
"""

from __future__ import annotations

import configparser
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.io.workflow_file import load_workflow_file
from agora_optimizer.planning.validate import validate_plan
from agora_optimizer.plans.store import PlanStore, workflow_path
from agora_optimizer.ui.app import create_app
from tests.ui.conftest import (
    BIG,
    BIG_MACHINES,
    BIG_TASKS,
    CORRUPT,
    ERROR_HTML,
    EXAMPLE,
    OTHER,
    SCRIPT_NAME,
    SUB_PATH,
    UNICODE,
    AgoraUi,
)

pytestmark = pytest.mark.airflow


def routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the app, ``{dag_id}`` filled in."""
    app = create_app()
    assert all(isinstance(route, APIRoute) for route in app.routes)  # nothing mounted beside the routes
    found = [
        (method, route.path.replace("{dag_id}", EXAMPLE).replace("{index}", "0"))
        for route in app.routes
        if isinstance(route, APIRoute)
        for method in sorted(route.methods)
    ]
    assert len(found) >= 15 and ("POST", f"/api/dags/{EXAMPLE}/reoptimize") in found
    return found


def dag_routes() -> list[tuple[str, str]]:
    return [(method, path) for method, path in routes() if f"/{EXAMPLE}" in path]


def send(ui: AgoraUi, method: str, path: str, user: str | None = None, **kwargs: Any) -> httpx.Response:
    if method == "POST":
        kwargs.setdefault("json", {})
    return ui.request(method, path, user, **kwargs)


def test_every_route_answers_401_without_a_valid_airflow_token(agora_ui: AgoraUi) -> None:
    expired = "eyJhbGciOiJIUzUxMiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxIiwiZXhwIjoxfQ.c2lnbmF0dXJl"
    for method, path in routes():
        for headers, cookies in (
            ({}, {}),
            ({"Authorization": "Bearer not-a-jwt"}, {}),
            ({"Authorization": f"Bearer {expired}"}, {}),
            ({}, {"_token": "not-a-jwt"}),
        ):
            answer = send(agora_ui, method, path, headers=headers, cookies=cookies)
            assert answer.status_code == 401, (method, path, headers, cookies, answer.text[:300])
            assert answer.headers["www-authenticate"] == "Bearer"
    page = agora_ui.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 401 and "Log in to Airflow" in page.text and "agora-csrf" not in page.text


def test_a_logged_in_user_sees_the_pages_and_the_json_api(agora_ui: AgoraUi) -> None:
    dags = agora_ui.get("/api/dags", "admin").json()
    assert [d["dag_id"] for d in dags["dags"]] == [BIG, EXAMPLE, OTHER]
    example = agora_ui.get(f"/api/dags/{EXAMPLE}", "admin").json()
    assert example["tasks"] == 5 and example["can_reoptimize"] and example["savings"]["available"]
    assert example["savings"]["cost_saving"] == pytest.approx(
        1 - example["cost_usd"] / example["savings"]["default_cost_usd"]
    )
    tasks = {t["task"]: t for t in agora_ui.get(f"/api/dags/{EXAMPLE}/tasks", "admin").json()["tasks"]}
    assert tasks["aggregate"]["runs"] == 3 and tasks["aggregate"]["actual_mean_runtime_s"] == pytest.approx(160.0)
    assert tasks["aggregate"]["actual_max_peak_rss_bytes"] == 2600 * 2**20 and tasks["load"]["runs"] == 0
    history = agora_ui.get(f"/api/dags/{EXAMPLE}/history", "admin").json()
    assert history["total"] == 2 and [p["current"] for p in history["plans"]] == [True, False]
    assert [p["objective"] for p in history["plans"]] == ["balanced", "cost"]  # newest first
    front = wait_for_front(agora_ui, EXAMPLE)
    assert len(front["points"]) >= 2 and front["default"] is not None
    assert min(p["makespan_s"] for p in front["points"]) <= front["chosen"]["makespan_s"] + 1e-6
    for path in ("/", f"/dags/{EXAMPLE}", "/traces", f"/traces?dag_id={EXAMPLE}&state=success"):
        page = agora_ui.get(path, "admin")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), path
        assert "script-src 'self'" in page.headers["content-security-policy"]
    dag_page = agora_ui.get(f"/dags/{EXAMPLE}", "admin").text
    assert 'id="gantt"' in dag_page and 'id="pareto-plot"' in dag_page and f'id="reoptimize-{EXAMPLE}"' in dag_page
    for chart in (f"/dags/{EXAMPLE}/gantt.svg", f"/dags/{EXAMPLE}/pareto.svg"):
        answer = agora_ui.get(chart, "admin")
        assert answer.headers["content-type"] == "image/svg+xml"
        ET.fromstring(answer.text)
    traces = agora_ui.get("/api/traces", "admin", params={"dag_id": EXAMPLE, "task_id": "clean"}).json()
    assert traces["total"] == 3 and {a["task_id"] for a in traces["attempts"]} == {"clean"}


def wait_for_front(ui: AgoraUi, dag_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        front = ui.get(f"/api/dags/{dag_id}/pareto", "admin").json()
        if front["status"] != "computing":
            assert front["status"] == "ready", front
            return front
        time.sleep(1)
    raise AssertionError(f"the Pareto front of {dag_id} was not computed in 120 s")


def test_a_user_without_rights_on_a_dag_can_neither_see_its_plan_nor_reoptimize_it(agora_ui: AgoraUi) -> None:
    assert [d["dag_id"] for d in agora_ui.get("/api/dags", "outsider").json()["dags"]] == [OTHER]
    assert EXAMPLE not in agora_ui.get("/", "outsider").text
    runs_before = len(agora_ui.rerun_confs())
    for method, path in dag_routes():
        answer = send(agora_ui, method, path, "outsider")
        assert answer.status_code == 403, (method, path, answer.text[:300])
        assert "makespan" not in answer.text and "aggregate" not in answer.text
    assert len(agora_ui.rerun_confs()) == runs_before
    assert agora_ui.get("/api/traces", "outsider", params={"dag_id": EXAMPLE}).status_code == 403
    attempts = agora_ui.get("/api/traces", "outsider").json()["attempts"]
    assert attempts and {a["dag_id"] for a in attempts} == {OTHER}
    assert agora_ui.get(f"/api/dags/{OTHER}", "outsider").json()["can_reoptimize"]


def test_a_read_only_user_sees_the_plan_but_cannot_reoptimize(agora_ui: AgoraUi) -> None:
    listed = agora_ui.get("/api/dags", "reader").json()["dags"]
    assert [(d["dag_id"], d["can_reoptimize"]) for d in listed] == [(EXAMPLE, False)]
    page = agora_ui.get(f"/dags/{EXAMPLE}", "reader")
    assert page.status_code == 200 and 'id="gantt"' in page.text and "data-reoptimize" not in page.text
    answer = agora_ui.post(f"/api/dags/{EXAMPLE}/reoptimize", "reader", json={})
    assert answer.status_code == 403 and "may not edit" in answer.json()["detail"]
    assert agora_ui.get(f"/dags/{OTHER}", "reader").status_code == 403


def test_an_editor_queues_the_rerun_dag_with_a_json_post_and_a_csrf_token(agora_ui: AgoraUi) -> None:
    path = f"/api/dags/{EXAMPLE}/reoptimize"
    assert agora_ui.get(path, "editor").status_code == 405  # never a GET
    assert agora_ui.post(path, "editor", data={"x": "1"}).status_code == 415  # no HTML form can post it
    first = agora_ui.post(path, "editor", json={})
    assert first.status_code == 202, first.text
    queued = first.json()
    assert queued["rerun_dag_id"] == "agora_reoptimize" and queued["state"] == "queued"
    runs = agora_ui.airflow.request("GET", "/dags/agora_reoptimize/dagRuns", params={"limit": 100})["dag_runs"]
    run = next(r for r in runs if r["dag_run_id"] == queued["run_id"])
    assert run["conf"] == {"dag_id": EXAMPLE} and run["state"] == "queued" and run["triggering_user_name"] == "editor"
    again = agora_ui.post(path, "editor", json={}).json()
    assert again["already_queued"] and again["run_id"] == queued["run_id"]  # one waiting run per DAG
    # The browser's way: Airflow's cookie, which any same-site request carries, needs the page's CSRF token too.
    cookie = {"_token": agora_ui.token("editor")}
    assert httpx.post(f"{agora_ui.base}{path}", json={}, cookies=cookie, timeout=60).status_code == 403
    page = httpx.get(f"{agora_ui.base}/dags/{EXAMPLE}", cookies=cookie, timeout=60).text
    token = re.search(r'<meta name="agora-csrf" content="([0-9a-f]{64})">', page)
    assert token is not None
    forged = {"X-Agora-CSRF": "0" * 64}
    assert httpx.post(f"{agora_ui.base}{path}", json={}, cookies=cookie, headers=forged, timeout=60).status_code == 403
    real = {"X-Agora-CSRF": token[1]}
    assert httpx.post(f"{agora_ui.base}{path}", json={}, cookies=cookie, headers=real, timeout=60).status_code == 202
    other_token = re.search(r'content="([0-9a-f]{64})"', agora_ui.get(f"/dags/{EXAMPLE}", "admin").text)
    assert other_token is not None and other_token[1] != token[1]  # a token is the user's own


def test_html_in_task_machine_and_trace_names_is_escaped_everywhere(agora_ui: AgoraUi) -> None:
    raw = [SCRIPT_NAME, '"><svg onload=alert(2)>', ERROR_HTML, "<b>bold</b>"]
    bodies = [
        agora_ui.get(f"/dags/{OTHER}", "admin").text,
        agora_ui.get(f"/dags/{OTHER}/gantt.svg", "admin").text,
        agora_ui.get("/traces", "admin", params={"dag_id": OTHER}).text,
    ]
    for body in bodies:
        for text in raw:
            assert text not in body
    assert "&lt;script&gt;alert(" in bodies[0] and "&lt;img src=x onerror=alert(1)&gt;" in bodies[2]
    ET.fromstring(bodies[1])  # well-formed: no name broke out of its text node or attribute


def test_pages_hold_no_secret(agora_ui: AgoraUi) -> None:
    config = configparser.ConfigParser(interpolation=None)
    config.read(agora_ui.airflow.home / "airflow.cfg")
    secrets = [config.get("api", "secret_key", fallback=""), config.get("api_auth", "jwt_secret", fallback="")]
    secrets += [agora_ui.airflow.env["AIRFLOW__AGORA__TRACE_STORE_URL"], str(agora_ui.airflow.home)]
    for path in ("/", f"/dags/{EXAMPLE}", f"/dags/{EXAMPLE}/runs", "/traces", "/assets/agora.js", "/openapi.json"):
        body = agora_ui.get(path, "admin").text
        assert not [s for s in secrets if s and s in body], path


def test_a_5000_task_plan_is_shown_a_page_at_a_time(agora_ui: AgoraUi) -> None:
    page = agora_ui.get(f"/dags/{BIG}", "admin")
    assert page.status_code == 200 and len(page.content) < 200_000
    assert page.text.count("<tr><td>step_") == 50 and f"1-50 of {BIG_TASKS}" in page.text
    assert f"machines page 1 of 2 ({BIG_MACHINES} machines)" in page.text
    chart = re.search(r'<svg[^>]*id="gantt".*?</svg>', page.text, re.S)
    assert chart is not None
    gantt = ET.fromstring(chart[0])
    machines = [t.text for t in gantt.iter("{http://www.w3.org/2000/svg}text") if t.get("class") == "machine"]
    assert len(machines) == len(set(machines)) == 40 and machines[:2] == ["c5.large#0", "c5.large#3"]
    second = agora_ui.get(f"/dags/{BIG}/gantt.svg", "admin", params={"machine_page": 1}).text
    assert len(second) < 100_000 and "(machines 41-60)" in second
    last = agora_ui.get(f"/api/dags/{BIG}/tasks", "admin", params={"offset": BIG_TASKS - 10, "limit": 50}).json()
    assert last["total"] == BIG_TASKS and len(last["tasks"]) == 10
    assert agora_ui.get(f"/api/dags/{BIG}/tasks", "admin", params={"limit": 501}).status_code == 422
    found = agora_ui.get(f"/api/dags/{BIG}/tasks", "admin", params={"task": "step_4999"}).json()
    assert [t["task"] for t in found["tasks"]] == ["step_4999"]
    summary = agora_ui.get(f"/api/dags/{BIG}", "admin").json()
    assert summary["tasks"] == BIG_TASKS and summary["savings"]["available"]  # the default of all 5,000 tasks


def test_the_openapi_schema_describes_the_json_api(agora_ui: AgoraUi) -> None:
    schema = agora_ui.get("/openapi.json", "admin").json()
    assert schema["servers"] == [{"url": f"{SUB_PATH}/agora"}]  # under Airflow's sub-path
    assert {"/api/dags", "/api/dags/{dag_id}/tasks", "/api/traces", "/api/dags/{dag_id}/reoptimize"} <= set(
        schema["paths"]
    )
    post = schema["paths"]["/api/dags/{dag_id}/reoptimize"]["post"]
    assert "application/json" in post["requestBody"]["content"] and post["security"] == [{"HTTPBearer": []}]
    assert not any(path.startswith("/dags") or path == "/" for path in schema["paths"])  # pages are not API


def test_a_corrupt_plan_is_a_clear_error_on_the_page_and_in_the_api(agora_ui: AgoraUi) -> None:
    for path in (f"/api/dags/{CORRUPT}", f"/api/dags/{CORRUPT}/tasks", f"/api/dags/{CORRUPT}/pareto"):
        answer = agora_ui.get(path, "admin")
        assert answer.status_code == 422, (path, answer.text[:300])
        detail = answer.json()["detail"]
        assert f"the plan {CORRUPT}/current.json of DAG {CORRUPT} cannot be read: invalid JSON" in detail
        assert str(agora_ui.airflow.home.parent) not in detail  # the server's directories are not shown
    page = agora_ui.get(f"/dags/{CORRUPT}", "admin", headers={"Accept": "text/html"})
    assert page.status_code == 422 and "cannot be read: invalid JSON" in page.text and "Traceback" not in page.text
    assert agora_ui.get("/api/dags", "admin").status_code == 200  # the list still answers


def test_dag_ids_airflow_refuses_are_a_404_and_a_unicode_dag_id_is_served(agora_ui: AgoraUi) -> None:
    for raw in ("%2e%2e", "%2E%2e", "a%20b"):
        answer = agora_ui.get(f"/api/dags/{raw}", "admin")
        assert answer.status_code == 404 and "is not a valid Airflow DAG id" in answer.json()["detail"], raw
    for raw in ("a%2Fb", "..%2F..%2Fetc"):
        assert agora_ui.get(f"/api/dags/{raw}", "admin").status_code == 404, raw
    summary = agora_ui.get(f"/api/dags/{UNICODE}", "admin")
    assert summary.status_code == 200 and summary.json()["dag_id"] == UNICODE
    history = agora_ui.get(f"/api/dags/{UNICODE}/history", "admin").json()
    assert history["total"] == 1 and history["plans"][0]["current"] and history["plans"][0]["applied_at"]
    page = agora_ui.get(f"/dags/{UNICODE}", "admin")
    assert page.status_code == 200 and f'<span id="dag-id">{UNICODE}</span>' in page.text
    assert agora_ui.get(f"/dags/{UNICODE}/gantt.svg", "admin").headers["content-type"] == "image/svg+xml"


def test_plan_vs_actual_shows_the_recorded_runs_to_whoever_may_read_the_dag(agora_ui: AgoraUi) -> None:
    """The records conftest.py put with RunStore into the deployment's trace store, as the api-server reads them."""
    body = agora_ui.get(f"/api/dags/{EXAMPLE}/runs", "reader").json()
    assert [r["run_id"] for r in body["runs"]] == [
        "scheduled__planned1",
        "scheduled__planned0",
        "manual__unplanned1",
        "manual__unplanned0",
    ]
    summary = agora_ui.get(f"/api/dags/{EXAMPLE}", "reader").json()
    newest = body["runs"][0]
    assert newest["planned_makespan_s"] == pytest.approx(summary["makespan_s"])
    assert newest["makespan_ratio"] == pytest.approx(1.25) and newest["makespan_off"]
    assert newest["cost_ratio"] == pytest.approx(1.15) and newest["cost_off"] and newest["repairs"] == 1
    assert not body["runs"][1]["makespan_off"] and not body["runs"][1]["cost_off"]
    saving = body["saving"]
    planned_makespan = summary["makespan_s"] * (1.05 + 1.25) / 2
    assert saving["available"] and saving["makespan_saving"] == pytest.approx(1 - planned_makespan / 500.0)
    assert saving["predicted"]["cost_saving"] == pytest.approx(summary["savings"]["cost_saving"])
    assert body["selected"]["notes"] == ["note of planned run 1"]
    assert body["selected"]["repairs"][0]["reason"] == "machine lost"
    page = agora_ui.get(f"/dags/{EXAMPLE}/runs", "reader")
    assert page.status_code == 200 and 'id="run-gantt"' in page.text and 'class="num ratio off"' in page.text
    chart = agora_ui.get(f"/dags/{EXAMPLE}/run-gantt.svg", "reader", params={"run_id": "scheduled__planned0"})
    assert chart.headers["content-type"] == "image/svg+xml"
    kinds = {r.get("class") for r in ET.fromstring(chart.text).iter("{http://www.w3.org/2000/svg}rect")}
    assert {"planned", "actual"} <= kinds
    assert f"{EXAMPLE}/runs" in agora_ui.get(f"/dags/{EXAMPLE}", "reader").text  # linked from the DAG page
    assert f"{EXAMPLE}/runs" in agora_ui.get("/", "reader").text  # and from the index
    for path in (f"/api/dags/{EXAMPLE}/runs", f"/dags/{EXAMPLE}/runs", f"/dags/{EXAMPLE}/run-gantt.svg"):
        answer = agora_ui.get(path, "outsider")
        assert answer.status_code == 403 and "planned" not in answer.text, path


def test_plan_vs_actual_of_a_dag_without_records_or_unknown(agora_ui: AgoraUi) -> None:
    page = agora_ui.get(f"/dags/{UNICODE}/runs", "admin")
    assert page.status_code == 200 and "No recorded runs yet" in page.text and "agora runs record" in page.text
    assert agora_ui.get(f"/api/dags/{OTHER}/runs", "admin").json()["runs"] == []
    for path in ("/api/dags/agora_nowhere/runs", "/dags/agora_nowhere/runs"):
        answer = agora_ui.get(path, "admin")
        assert answer.status_code == 404 and "no DAG agora_nowhere" in answer.json()["detail"], path


def test_an_editor_puts_a_point_of_the_pareto_front_in_force(agora_ui: AgoraUi, tmp_path: Path) -> None:
    store = PlanStore(agora_ui.airflow.env["AIRFLOW__AGORA__PLAN_DIR"])
    original = tmp_path / "original.json"
    original.write_bytes(store.current_path(EXAMPLE).read_bytes())
    front = wait_for_front(agora_ui, EXAMPLE)
    version, points = front["plan_version"], front["points"]
    assert [p["index"] for p in points] == list(range(len(points)))
    chosen = front["chosen"]
    target = max(points, key=lambda p: abs(p["cost_usd"] - chosen["cost_usd"]))  # the point least like the plan
    path = f"/api/dags/{EXAMPLE}/pareto/{target['index']}/apply"
    body = {"plan_version": version}
    assert agora_ui.get(path, "editor").status_code == 405
    assert agora_ui.post(path, "editor", data={"plan_version": version}).status_code == 415
    assert agora_ui.post(path, "reader", json=body).status_code == 403
    assert agora_ui.post(path, "editor", json={"plan_version": "0-0"}).status_code == 409  # another plan's front
    beyond = agora_ui.post(f"/api/dags/{EXAMPLE}/pareto/{len(points)}/apply", "editor", json=body)
    assert beyond.status_code == 404 and f"has {len(points)} points" in beyond.json()["detail"]
    history = agora_ui.get(f"/api/dags/{EXAMPLE}/history", "admin").json()["total"]
    try:
        applied = agora_ui.post(path, "editor", json=body)
        assert applied.status_code == 200, applied.text
        answer = applied.json()
        assert (answer["makespan_s"], answer["cost_usd"]) == pytest.approx((target["makespan_s"], target["cost_usd"]))
        summary = agora_ui.get(f"/api/dags/{EXAMPLE}", "admin").json()
        assert (summary["makespan_s"], summary["cost_usd"]) == pytest.approx((answer["makespan_s"], answer["cost_usd"]))
        assert agora_ui.get(f"/api/dags/{EXAMPLE}/history", "admin").json()["total"] == history + 1
        # In force: a valid plan (section 3 of the spec) of the workflow kept beside it, on the platform's catalog.
        entry = store.history(EXAMPLE)[-1]
        current = load_plan(entry)
        assert entry.read_bytes() == store.current_path(EXAMPLE).read_bytes()
        assert current.objective.kind == answer["objective"]
        catalog = load_catalog(agora_ui.airflow.env["AIRFLOW__AGORA__CATALOG"])
        assert validate_plan(current, load_workflow_file(workflow_path(entry)), catalog) == []
        assert agora_ui.post(path, "editor", json=body).status_code == 409  # the front read before is stale now
    finally:
        store.save(EXAMPLE, load_plan(original))  # the other tests' plan back, byte for byte
    assert store.current_path(EXAMPLE).read_bytes() == original.read_bytes()


def test_the_platforms_window_shows_each_user_the_runs_of_the_dags_they_may_read(agora_ui: AgoraUi) -> None:
    whole = agora_ui.get("/api/platform", "admin").json()
    assert [r["dag_id"] for r in whole["runs"]] == [EXAMPLE, OTHER] and whole["hidden_runs"] == 0
    assert [r["offset_s"] for r in whole["runs"]] == [0.0, 600.0] and whole["runs"][0]["deadline_s"] == 3600.0
    assert set(whole["ways"]) == {"joint", "first come"} and whole["machines"] >= 1
    assert whole["ways"]["joint"]["cost_usd"] >= whole["cost_lower_bound_usd"] - 1e-9
    assert whole["ways"]["joint"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in whole["runs"]))
    page = agora_ui.get("/platform", "admin")
    assert page.status_code == 200 and 'id="gantt"' in page.text and 'id="ways"' in page.text
    assert f'data-run="{EXAMPLE}@' in page.text and f'data-run="{OTHER}@' in page.text
    chart = agora_ui.get("/platform/gantt.svg", "admin")
    assert chart.headers["content-type"] == "image/svg+xml" and OTHER in chart.text
    ET.fromstring(chart.text)
    assert 'id="platform-link"' in agora_ui.get("/", "admin").text
    # A reader of the example DAG alone: its run, not agora_other's, and no totals that would tell of it.
    part = agora_ui.get("/api/platform", "reader").json()
    assert [r["dag_id"] for r in part["runs"]] == [EXAMPLE] and part["hidden_runs"] == 1 and part["ways"] == {}
    assert part["machines"] <= whole["machines"]
    hidden = agora_ui.get("/platform/gantt.svg", "reader").text
    assert OTHER not in hidden and EXAMPLE in hidden
    assert "1 more runs of DAGs you may not read" in agora_ui.get("/platform", "reader").text
