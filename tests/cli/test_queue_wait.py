"""``agora queue ...`` end to end on the real cluster, through Typer's test runner."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agora_optimizer.cli.queue_wait import queue_app
from agora_optimizer.queue_wait.recorder import QueueWaitStore
from tests.slurm_cluster import SlurmCluster, sbatch, scancel
from tests.slurm_fixtures import RecordedRun

app = typer.Typer()
app.add_typer(queue_app, name="queue")
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["queue", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.usefixtures("slurm_cluster")
def test_snapshot_prints_the_partitions() -> None:
    job = sbatch("-p", "debug", "--hold", "-c", "1", "--mem=100M", "-t", "1")
    try:
        code, out, _ = invoke("snapshot", "--json")
        assert code == 0
        document = json.loads(out)
        debug = next(p for p in document["partitions"] if p["partition"] == "debug")
        assert debug["pending_jobs"] >= 1
        code, out, _ = invoke("snapshot", "--method", "format")
        assert code == 0 and "debug" in out and "squeue --Format" in out
    finally:
        scancel(job)


def test_record_update_train_predict(recorded_run: RecordedRun, slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    copy = tmp_path / "waits.db"  # the session's recorded waits, plus the job this test records
    shutil.copy(recorded_run.store_url.removeprefix("sqlite:///"), copy)
    store_url = f"sqlite:///{copy}"
    job = sbatch("-p", "debug", "-c", "1", "--mem=100M", "-t", "1", command="true")
    code, out, err = invoke(
        "record", "--job-id", job, "-p", "debug", "--cores", "1", "--mem-gib", "0.1", "--time-limit-s", "60",
        "--store", store_url,
    )  # fmt: skip
    assert code == 0, err
    assert f"recorded job {job}" in out
    code, out, err = invoke("update", "--store", store_url, "--jobcomp", str(slurm_cluster.jobcomp))
    assert code == 0, err and "wait(s) recorded" in out
    model_dir = tmp_path / "model"
    code, out, err = invoke("train", "--store", store_url, "--out", str(model_dir), "--min-samples", "8")
    assert code == 0, err
    seen = len(QueueWaitStore(store_url).observations())
    assert f"from {seen} recorded waits" in out and (model_dir / "queue_wait.json").is_file()
    code, out, err = invoke(
        "predict", "-p", "compute", "--cores", "2", "--mem-gib", "1", "--time-limit-s", "120",
        "--model", str(model_dir), "--json",
    )  # fmt: skip
    assert code == 0, err
    answer = json.loads(out)
    assert answer["wait_s"] >= 0 and answer["features"]["partition"] == "compute"
    assert f"{seen} recorded waits" in answer["model"]


def test_predict_without_a_model_is_zero_with_a_warning(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    code, out, err = invoke("predict", "-p", "debug", "--cores", "1", "--mem-gib", "1")
    assert code == 0
    assert "predicted queue wait in debug: 0.0 s" in out
    assert "agora: warning: no queue-wait model in" in err


def test_errors_are_one_line_and_exit_code_2(tmp_path: Path) -> None:
    code, _, err = invoke("predict", "-p", "debug", "--cores", "1", "--mem-gib", "1", "--model", str(tmp_path))
    assert code == 2
    assert err.strip().splitlines() == [f"agora: error: {tmp_path / 'queue_wait.json'}: no queue-wait model here "
                                        "(train one with 'agora queue train')"]  # fmt: skip
    code, _, err = invoke("train", "--store", f"sqlite:///{tmp_path}/x/../../no/such/dir/\0.db", "--out", str(tmp_path))
    assert code == 2 and err.startswith("agora: error: queue-wait store")


@pytest.mark.parametrize("option", ["--mem-gib", "--time-limit-s"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e13"])
def test_a_number_out_of_range_is_one_line_naming_the_option(option: str, value: str, tmp_path: Path) -> None:
    """``nan`` passed typer's own min/max, and then failed as a traceback (int(nan))."""
    values = {"--mem-gib": "1", "--time-limit-s": "60"} | {option: value}
    args = [arg for name, number in values.items() for arg in (name, number)]
    for command in (["predict", "--model", str(tmp_path)], ["record", "--job-id", "1", "--store", "sqlite://"]):
        code, _, err = invoke(*command, "-p", "debug", "--cores", "1", *args)
        assert code == 2, err
        (line,) = err.strip().splitlines()
        assert line.startswith(f"agora: error: option {option}: expected a number in "), line
        assert line.endswith(f"got {float(value):g}"), line
