"""``agora traces list|stats|import-airflow`` on a real SQLite store: output, and one-line errors with exit 2."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora_optimizer.cli.common import out_console
from agora_optimizer.cli.traces import traces_app
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _store_with_rows(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    rows = [
        TaskAttempt.create(
            dag_id="genome",
            task_id=task,
            run_id=f"r{i}",
            started_at=T0,
            ended_at=T0 + timedelta(seconds=10 * (i + 1)),
            peak_rss_bytes=(i + 1) * 2**30,
            cpu_time_s=5.0 * (i + 1),
            state="failed" if (task, i) == ("align", 1) else "success",
            resource_type="m7i.large",
        )
        for task in ("align", "index")
        for i in range(2)
    ]
    with TraceStore(url) as store:
        store.add(rows)
    return url


def test_list_prints_json_rows_with_iso_times(tmp_path: Path) -> None:
    url = _store_with_rows(tmp_path)
    result = CliRunner().invoke(traces_app, ["list", "--store", url, "--json", "--task", "align"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["run_id"], r["state"]) for r in rows] == [("r0", "success"), ("r1", "failed")]
    assert rows[1]["started_at"] == "2026-03-01T12:00:00+00:00"
    assert rows[1]["runtime_s"] == 20.0


def test_list_and_stats_print_tables(tmp_path: Path) -> None:
    url = _store_with_rows(tmp_path)
    listed = CliRunner().invoke(traces_app, ["list", "--store", url, "--state", "failed"])
    assert listed.exit_code == 0, listed.output
    assert "1 attempt(s)" in listed.output and "failed" in listed.output
    stats = CliRunner().invoke(traces_app, ["stats", "--store", url, "--json"])
    assert stats.exit_code == 0, stats.output
    summary = json.loads(stats.output)
    assert summary["attempts"] == 4
    align = next(t for t in summary["tasks"] if t["task_id"] == "align")
    assert (align["attempts"], align["failed"], align["max_peak_rss_bytes"]) == (2, 1, 2 * 2**30)
    assert align["mean_runtime_s"] == 15.0
    table = CliRunner().invoke(traces_app, ["stats", "--store", url])
    assert table.exit_code == 0 and "4 attempt(s) of 2 task(s)" in table.output


def test_no_attempts_is_one_line_and_a_missing_store_is_not_created(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'none' / 'traces.db'}"
    with TraceStore(f"sqlite:///{tmp_path / 'empty.db'}") as store:
        empty = store.url
    for url in (missing, empty):
        for command in (["list"], ["stats"]):
            shown = CliRunner().invoke(traces_app, [*command, "--store", url])
            assert (shown.exit_code, shown.stdout) == (0, f"no attempts recorded in {url}\n")
        assert json.loads(CliRunner().invoke(traces_app, ["list", "--store", url, "--json"]).stdout) == []
    filtered = CliRunner().invoke(traces_app, ["list", "--store", _store_with_rows(tmp_path), "--dag", "nope"])
    assert filtered.stdout.startswith("no attempts recorded in sqlite:///") and filtered.stdout.endswith(
        " that match\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "traces.db"]  # no directory, no database made


def test_names_show_as_they_are_never_as_rich_markup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu[a100]`` once showed as ``gpu`` (rich read ``[a100]`` as a style) and a task ``align[/x]`` ended
    ``traces list`` and ``traces stats`` in a MarkupError traceback."""
    monkeypatch.setattr(out_console, "width", 250)
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    attempt = TaskAttempt.create(
        dag_id="genome[a100]", task_id="align[/x]", run_id="r[/x]", started_at=T0, ended_at=T0 + timedelta(seconds=10),
        resource_type="gpu[a100]", host="node[a1]",
    )  # fmt: skip
    with TraceStore(url) as store:
        store.add([attempt])
    listed = CliRunner().invoke(traces_app, ["list", "--store", url])
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if "align[/x]" in line)
    assert "gpu[a100]" in row and "node[a1]" in row and "r[/x]" in row
    stats = CliRunner().invoke(traces_app, ["stats", "--store", url])
    assert stats.exit_code == 0, stats.output
    row = next(line for line in stats.stdout.splitlines() if "align[/x]" in line)
    assert "genome[a100]" in row


def test_an_unknown_state_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(traces_app, ["list", "--store", _store_with_rows(tmp_path), "--state", "exploded"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "agora: error: --state: field 'state': must be one of success, failed, oom_killed, cancelled, lost, "
        "interrupted, got 'exploded'"
    ]


def test_an_unreachable_store_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(traces_app, ["stats", "--store", "postgresql+psycopg://u:hidden@127.0.0.1:1/x"])
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("agora: error: trace store postgresql+psycopg://u:***@127.0.0.1:1/x: cannot reach")
    assert "hidden" not in line


def test_importing_an_empty_history_warns_and_writes_nothing(
    tmp_path: Path, http_server: tuple[str, dict[str, tuple[int, str]]]
) -> None:
    url, answers = http_server
    answers["/api/v2/"] = (200, '{"task_instances": [], "next_cursor": null}')
    store = f"sqlite:///{tmp_path / 'empty.db'}"
    result = CliRunner().invoke(traces_app, ["import-airflow", "--api-url", url, "--store", store])
    assert result.exit_code == 0, result.output
    assert f"agora: warning: {url} lists no ended task instance (0 listed); nothing imported" in result.output
    assert "imported 0 attempt(s)" in result.output
    with TraceStore(store) as trace_store:
        assert trace_store.count() == 0


def test_importing_from_an_api_that_is_down_is_one_line_and_exit_2(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'none.db'}"
    result = CliRunner().invoke(traces_app, ["import-airflow", "--api-url", "http://127.0.0.1:1", "--store", store])
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("agora: error: Airflow API http://127.0.0.1:1: cannot reach the API")


def test_import_wfformat_files_writes_every_recorded_task_once(tmp_path: Path) -> None:
    from tests.conftest import BUNDLED

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    files = [BUNDLED / "blast-chameleon-small-001.json", BUNDLED / "srasearch-chameleon-10a-001.json"]
    tasks = {f.stem: len(json.loads(f.read_text())["workflow"]["execution"]["tasks"]) for f in files}
    for _ in range(2):  # importing again updates the same rows
        result = CliRunner().invoke(traces_app, ["import", *map(str, files), "--store", url])
        assert result.exit_code == 0, result.stderr
        assert f"imported {sum(tasks.values())} attempt(s) from 2 file(s)" in result.stdout
    with TraceStore(url) as store:
        assert store.count() == sum(tasks.values())
        blast = store.attempts(dag_id="blast-chameleon-small-001")
    assert len(blast) == tasks["blast-chameleon-small-001"]
    assert all(a.runtime_s is not None and a.peak_rss_bytes for a in blast)


def test_import_of_a_missing_file_writes_nothing(tmp_path: Path) -> None:
    from tests.conftest import BUNDLED

    url = f"sqlite:///{tmp_path / 'traces.db'}"
    good = BUNDLED / "blast-chameleon-small-001.json"
    result = CliRunner().invoke(traces_app, ["import", str(good), str(tmp_path / "missing.json"), "--store", url])
    assert result.exit_code == 2
    assert "missing.json" in result.stderr
    with TraceStore(url) as store:
        assert store.count() == 0
