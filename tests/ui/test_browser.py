"""The agora view in a real headless browser: Debian's chromium, driven by Playwright's Python API.

Nothing is downloaded at run time: the browser is ``/usr/bin/chromium`` (``scripts/install_browser.sh``
installs it with apt-get when it is missing) and Playwright only drives it (``playwright install``
is never run). Airflow is served under a sub-path (``tests/ui/conftest.py``). The test logs in on
Airflow's login page, opens "agora" from Airflow's navigation,
finds the Gantt chart and the Pareto plot of the example DAG, clicks re-optimize, and checks
through Airflow's REST API that a run of agora_reoptimize was queued for that DAG; applies a point of
the front (the example's plan is put back at the end); then it opens
the DAG's "Plan vs actual" page (run records put in the deployment's trace store) and a run of it. It saves
screenshots in ``$AGORA_ARTIFACTS`` (default ``out/artifacts/``, which git ignores) for CI.

Without chromium or Playwright it fails in CI (``CI=true``) and is skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.io.plan_file import plan_from_document
from agora_optimizer.plans.store import PlanStore
from harness.local_airflow import PASSWORD
from tests.conftest import REPO
from tests.ui.conftest import EXAMPLE, OTHER, AgoraUi

pytestmark = [pytest.mark.airflow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")


def unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the browser test cannot run in CI: {reason}")
    pytest.skip(reason)


def chromium() -> Path:
    """Debian's chromium, installed by scripts/install_browser.sh when missing."""
    if not CHROMIUM.exists():
        result = subprocess.run(
            ["bash", str(REPO / "scripts" / "install_browser.sh")], capture_output=True, text=True, timeout=900
        )
        if result.returncode != 0 or not CHROMIUM.exists():
            unavailable(f"no chromium at {CHROMIUM} and install_browser.sh failed: {result.stderr.strip()[-500:]}")
    return CHROMIUM


def artifacts() -> Path:
    folder = Path(os.environ.get("AGORA_ARTIFACTS") or REPO / "out" / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Any:
    executable = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install playwright; no browser download)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(executable), headless=True, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_log_in_open_agora_from_the_navigation_and_reoptimize_the_example_dag(agora_ui: AgoraUi, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    folder = artifacts()
    store = PlanStore(agora_ui.airflow.env["AIRFLOW__AGORA__PLAN_DIR"])
    original = store.current_path(EXAMPLE).read_bytes()
    try:
        page.goto(f"{agora_ui.airflow.api_url}/")
        page.fill("#username", "admin")  # Airflow's login page (the FAB auth manager's)
        page.fill("#password", PASSWORD)
        page.click("[type=submit]")
        page.get_by_role("link", name="agora", exact=True).click()  # the plugin's entry in Airflow's navigation
        view = page.frame_locator("iframe")
        view.locator(f"table#dags tr[data-dag-id='{EXAMPLE}']").wait_for()
        framed = next(f.url for f in page.frames if f != page.main_frame)
        assert framed.startswith(f"{agora_ui.airflow.api_url}/agora/"), framed  # inside Airflow's sub-path
        assert view.locator(f"table#dags tr[data-dag-id='{OTHER}']").count() == 1
        view.get_by_role("link", name=EXAMPLE, exact=True).click()

        gantt = view.locator("svg#gantt")
        gantt.wait_for()
        assert gantt.locator("rect.task").count() >= 1
        pareto = view.locator("svg#pareto-plot")
        pareto.wait_for(timeout=120_000)  # computed in the background on first view, then fetched by the page
        assert pareto.locator(".front-point").count() >= 2 and pareto.locator(".chosen-point").count() == 1

        view.locator(f"#reoptimize-{EXAMPLE}").click()
        status = view.locator(f"#status-{EXAMPLE}")
        view.locator(f"#status-{EXAMPLE}[data-state]").wait_for()
        assert status.get_attribute("data-state") == "queued", status.inner_text()
        run_id = status.inner_text().rsplit(" run ", 1)[1]

        apply = view.locator("#pareto-points button[data-point]")  # every point of the front, each a plan
        assert apply.count() == pareto.locator(".front-point").count()
        apply.last.click()
        applied = view.locator("#pareto-points .status[data-state]")
        applied.wait_for()
        assert applied.get_attribute("data-state") == "applied", applied.inner_text()
        assert store.current_path(EXAMPLE).read_bytes() != original
        page.screenshot(path=str(folder / "agora-ui-dag.png"), full_page=True)

        runs = agora_ui.airflow.request("GET", "/dags/agora_reoptimize/dagRuns", params={"limit": 100})["dag_runs"]
        run = next(r for r in runs if r["dag_run_id"] == run_id)
        assert run["conf"] == {"dag_id": EXAMPLE} and run["state"] == "queued"

        view.locator("#runs-link").click()  # Plan vs actual: the records conftest.py put in the trace store
        run_chart = view.locator("svg#run-gantt")
        run_chart.wait_for()
        assert run_chart.locator("rect.planned").count() >= 1 and run_chart.locator("rect.actual").count() >= 1
        assert view.locator("table#runs tr[data-run-id]").count() == 4
        assert view.locator("table#runs td.off").count() == 2  # the newest run: 25 % slower, 15 % dearer
        view.get_by_role("link", name="scheduled__planned0", exact=True).click()
        view.locator("#run-id", has_text="scheduled__planned0").wait_for()
        assert "note of planned run 0" in view.locator("#notes").inner_text()
        page.screenshot(path=str(folder / "agora-ui-runs.png"), full_page=True)

        view.get_by_role("link", name="Traces", exact=True).click()  # rows whose names are HTML
        view.locator("table#traces").wait_for()
        assert view.locator("table#traces img").count() == 0 and view.locator("table#traces b").count() == 0
        page.screenshot(path=str(folder / "agora-ui-traces.png"), full_page=True)

        view.get_by_role("link", name="Platform", exact=True).click()  # the window of many DAG runs in force
        platform = view.locator("svg#gantt")
        platform.wait_for()
        drawn = platform.inner_html()  # each bar titled with its run and task: both DAGs' runs are drawn
        assert platform.locator("rect.task").count() >= 2 and f"{EXAMPLE}@" in drawn and f"{OTHER}@" in drawn
        assert view.locator("table#window-runs tr[data-run]").count() == 2
        assert view.locator("table#ways tr[data-way]").count() == 2
        page.screenshot(path=str(folder / "agora-ui-platform.png"), full_page=True)
        assert dialogs == []  # no script from a name ever ran
    except Exception:
        page.screenshot(path=str(folder / "agora-ui-failure.png"), full_page=True)
        raise
    finally:
        page.close()
        if store.current_path(EXAMPLE).read_bytes() != original:  # the other tests' plan back, byte for byte
            store.save(EXAMPLE, plan_from_document(json.loads(original), "the example plan"))
