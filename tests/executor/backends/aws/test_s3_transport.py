"""AWS Batch jobs get their workload and return their result through S3 (moto's server plays S3 and Batch).

What moto cannot produce (access denied, throttling, 5xx) is tested on canned S3 answers;
what it cannot run (a container) is played by the worker as a local subprocess against the
same S3, with the endpoint a container would take from ``AWS_ENDPOINT_URL_S3``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend
from agora_optimizer.executor.backends.aws.provisioning import Infrastructure
from agora_optimizer.executor.jobs.spec import OOM_EXIT_CODE, BackendError, JobResult, JobSpec, job_key, read_result
from agora_optimizer.executor.worker.remote_files import RemoteFileNotFound, RemoteFiles, job_urls
from agora_optimizer.model.catalog import GIB
from harness.local_airflow import free_port
from tests.airflow_home import private_airflow_home
from tests.conftest import AWS_CATALOG
from tests.executor.backends.aws.canned import CannedServer, s3_error
from tests.executor.backends.aws.conftest import REGION, MotoServer, client, fake_session
from tests.executor.test_agora_executor import hand_over

# The executor tests build an AgoraExecutor, which needs Airflow configured before its first import
# (as tests/executor/conftest.py does when that folder runs too).
private_airflow_home("agora-s3-tests-")  # removed at exit

BUCKET = "agora-jobs"
JWT_SECRET = "agora-s3-tests-secret-of-at-least-64-bytes-for-hs512-0123456789abcdef"
TOKEN = "eyJ.workload-token.4711"  # a token no command, environment or tag may show


@pytest.fixture(scope="module")
def files(moto: MotoServer) -> RemoteFiles:
    client(moto, "s3").create_bucket(Bucket=BUCKET)
    return RemoteFiles.from_session(fake_session(), region_name=REGION, endpoint_url=moto.url)


@pytest.fixture
def prefix(files: RemoteFiles) -> str:
    """A fresh folder of the bucket per test: moto's server lives as long as the package's tests."""
    return f"s3://{BUCKET}/agora/{uuid.uuid4().hex[:8]}/"


@pytest.fixture
def s3_backend(moto: MotoServer, infrastructure: Infrastructure, prefix: str) -> AwsBatchBackend:
    return AwsBatchBackend(
        session=fake_session(), region_name=REGION, endpoint_url=moto.url, s3_prefix=prefix, s3_endpoint_url=moto.url
    )


def option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def result(**fields: Any) -> JobResult:
    base: dict[str, Any] = {
        "exit_code": 0,
        "oom_killed": False,
        "timed_out": False,
        "reason": "",
        "host": "ip-10-0-1-17",
        "started_at": datetime(2026, 11, 30, 10, 0, tzinfo=UTC),
        "ended_at": datetime(2026, 11, 30, 10, 5, tzinfo=UTC),
        "peak_rss_bytes": 700 * 2**20,
        "cpu_time_s": 41.5,
        "memory_limit_bytes": GIB,
    }
    return JobResult(**(base | fields))


OOM = result(
    exit_code=OOM_EXIT_CODE,
    oom_killed=True,
    reason=f"out of memory: peak RSS {GIB + 2**20} bytes > limit {GIB} bytes; killed",
    peak_rss_bytes=GIB + 2**20,
)


# -- remote files ----------------------------------------------------------------------------


def test_job_urls_put_each_job_in_its_own_folder_under_the_prefix() -> None:
    for prefix in ("s3://b-1/agora/", "s3://b-1/agora", "s3://b-1//agora//"):
        assert job_urls(prefix, "etl__load__r1__try2").result == "s3://b-1/agora/etl__load__r1__try2/result.json"
    assert job_urls("s3://b-1", "k").workload == job_urls("s3://b-1/", "k").workload == "s3://b-1/k/workload.json"
    for bad in ("", "b-1/agora/", "https://b-1/agora/", "s3://B_1/agora/", "s3://"):
        with pytest.raises(BackendError, match="is not an s3://bucket/") as caught:
            job_urls(bad, "k")
        assert not caught.value.transient


def test_a_round_trip_and_clear_errors_for_a_missing_object_or_bucket(
    files: RemoteFiles, prefix: str, tmp_path: Path
) -> None:
    url = job_urls(prefix, "k").workload
    files.write(url, b'{"token": "t"}')
    assert files.read(url) == b'{"token": "t"}'
    files.download(url, tmp_path / "copy.json")
    files.upload(tmp_path / "copy.json", url + ".2")
    assert files.read(url + ".2") == b'{"token": "t"}' and sorted(p.name for p in tmp_path.iterdir()) == ["copy.json"]

    missing = job_urls(prefix, "never-written").result
    with pytest.raises(RemoteFileNotFound) as no_object:
        files.read(missing)
    assert no_object.value.reason == f"cannot read {missing}: no such object" and not no_object.value.transient
    with pytest.raises(BackendError, match="bucket agora-nowhere does not exist") as no_bucket:
        files.write("s3://agora-nowhere/k/result.json", b"{}")
    assert "s3://agora-nowhere/k/result.json" in no_bucket.value.reason
    assert not no_bucket.value.transient and not isinstance(no_bucket.value, RemoteFileNotFound)


@pytest.mark.parametrize(
    ("status", "code", "transient", "says"),
    [
        (403, "AccessDenied", False, "access denied (AccessDenied: as S3 says it); the credentials need s3:GetObject"),
        (403, "InvalidAccessKeyId", False, "access denied (InvalidAccessKeyId"),
        (503, "SlowDown", True, "SlowDown: as S3 says it"),
        (500, "InternalError", True, "InternalError: as S3 says it"),
        (400, "RequestTimeout", True, "RequestTimeout: as S3 says it"),
    ],
)
def test_s3_errors_as_s3_sends_them(canned: CannedServer, status: int, code: str, transient: bool, says: str) -> None:
    canned.answer = s3_error(status, code, "as S3 says it")
    files = RemoteFiles.from_session(
        fake_session(), region_name=REGION, endpoint_url=canned.endpoint_url, max_attempts=1
    )
    with pytest.raises(BackendError) as caught:
        files.read(f"s3://{BUCKET}/k/result.json")
    assert caught.value.transient is transient and caught.value.backend == "s3"
    assert caught.value.reason.startswith(f"cannot read s3://{BUCKET}/k/result.json: {says}")


def test_an_unreachable_s3_is_transient() -> None:
    dead = RemoteFiles.from_session(
        fake_session(), region_name=REGION, endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1
    )
    with pytest.raises(BackendError, match=f"cannot write s3://{BUCKET}/k/workload.json: S3 unreachable") as caught:
        dead.write(f"s3://{BUCKET}/k/workload.json", b"{}")
    assert caught.value.transient


# -- the worker in a container ---------------------------------------------------------------


def run_worker(moto: MotoServer, job_dir: Path, *options: str, code: str, endpoint_variable: str) -> int:
    """The worker as a Batch container runs it: its credentials and S3 endpoint from the environment."""
    environment = os.environ | {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        endpoint_variable: moto.url,
    }
    worker = [sys.executable, "-m", "agora_optimizer.executor.worker", "--job-dir", str(job_dir), *options]
    done = subprocess.run(
        [*worker, "--", sys.executable, "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode


def downloaded_result(files: RemoteFiles, url: str, tmp_path: Path) -> JobResult:
    files.download(url, tmp_path / "downloaded.json")
    found = read_result(tmp_path / "downloaded.json")
    assert found is not None
    return found


def test_the_worker_fetches_its_workload_runs_and_returns_its_result(
    moto: MotoServer, files: RemoteFiles, prefix: str, tmp_path: Path
) -> None:
    urls = job_urls(prefix, "unit__t__r1__try1")
    files.write(urls.workload, json.dumps({"token": TOKEN}).encode())
    job_dir = tmp_path / "container" / "tmp" / "agora" / "unit__t__r1__try1"  # not there yet
    read_workload = f"import json; print(json.load(open({str(job_dir / 'workload.json')!r}))['token'])"
    code = run_worker(
        moto,
        job_dir,
        *("--workload-url", urls.workload, "--result-url", urls.result),
        code=read_workload + "; raise SystemExit(3)",
        endpoint_variable="AWS_ENDPOINT_URL_S3",
    )
    assert code == 3
    assert TOKEN in (job_dir / "task.log").read_text()  # the command saw the downloaded workload
    returned = downloaded_result(files, urls.result, tmp_path)
    assert returned == read_result(job_dir / "result.json")
    assert returned.exit_code == 3 and returned.reason == "exited with code 3" and not returned.oom_killed
    assert returned.peak_rss_bytes > 0 and returned.cpu_time_s >= 0


def test_a_workload_that_cannot_be_fetched_still_returns_a_result_naming_it(
    moto: MotoServer, files: RemoteFiles, prefix: str, tmp_path: Path
) -> None:
    urls = job_urls(prefix, "unit__gone__r1__try1")
    code = run_worker(
        moto,
        tmp_path / "job",
        *("--workload-url", urls.workload, "--result-url", urls.result),
        code="print('must not run')",
        endpoint_variable="AWS_ENDPOINT_URL",  # the endpoint of every service, when no S3 one is set
    )
    returned = downloaded_result(files, urls.result, tmp_path)
    assert code == returned.exit_code == 1
    assert (
        returned.reason == f"agora worker could not fetch its workload: s3: cannot read {urls.workload}: no such object"
    )
    assert not (tmp_path / "job" / "task.log").exists()


# -- the backend -----------------------------------------------------------------------------


def aws_job(key: str, prefix: str, job_dir: Path) -> JobSpec:
    urls = job_urls(prefix, key)
    job_dir.mkdir(parents=True, exist_ok=True)
    (job_dir / "workload.json").write_text(json.dumps({"token": TOKEN}))
    command = ("python", "-m", "agora_optimizer.executor.worker", "--job-dir", f"/tmp/agora/{key}")
    command += ("--workload-url", urls.workload, "--result-url", urls.result)
    return JobSpec(key, f"dag.{key}", "c5.large", 1, GIB, None, command, job_dir)


def test_submit_uploads_the_workload_and_status_reads_the_workers_oom_kill(
    s3_backend: AwsBatchBackend, files: RemoteFiles, prefix: str, batch: Any, tmp_path: Path
) -> None:
    job = aws_job("oom", prefix, tmp_path / "oom")
    job_id = s3_backend.submit(job)  # moto's simple mode: SUCCEEDED, exit code 0, at once
    urls = job_urls(prefix, "oom")
    assert files.read(urls.workload) == job.workload_path.read_bytes()
    [described] = batch.describe_jobs(jobs=[job_id])["jobs"]
    assert TOKEN not in json.dumps(described)  # not in the command, the environment or the tags

    before = s3_backend.status([job_id])[job_id]
    assert before.succeeded and before.peak_rss_bytes is None  # no result yet: Batch's view

    files.write(urls.result, OOM.to_json().encode())
    status = s3_backend.status([job_id])[job_id]
    assert status.phase == "finished" and status.oom_killed and not status.succeeded
    assert status.exit_code == OOM_EXIT_CODE and status.reason == OOM.reason
    assert (status.peak_rss_bytes, status.cpu_time_s) == (GIB + 2**20, 41.5)
    assert status.host == before.host and status.started_at == before.started_at  # Batch's times and log stream


def test_a_result_that_is_not_one_keeps_batchs_view_and_says_so(
    s3_backend: AwsBatchBackend, files: RemoteFiles, prefix: str, tmp_path: Path
) -> None:
    job_id = s3_backend.submit(aws_job("garbled", prefix, tmp_path / "garbled"))
    url = job_urls(prefix, "garbled").result
    files.write(url, b'{"format": "something-else"}')
    status = s3_backend.status([job_id])[job_id]
    assert status.exit_code == 0 and status.peak_rss_bytes is None
    assert f"worker result {url}: result file" in status.reason and "expected 'agora-job-result/1'" in status.reason


def test_a_job_fetching_its_workload_needs_a_backend_with_a_prefix(
    moto: MotoServer, prefix: str, tmp_path: Path
) -> None:
    plain = AwsBatchBackend(session=fake_session(), region_name=REGION, endpoint_url=moto.url)
    with pytest.raises(BackendError, match=r"dag.k: its worker fetches its workload from s3://.*no s3_prefix"):
        plain.submit(aws_job("k", prefix, tmp_path))
    with pytest.raises(BackendError, match="S3 prefix 'agora-jobs/agora/' is not an s3://bucket/"):
        AwsBatchBackend(session=fake_session(), region_name=REGION, s3_prefix="agora-jobs/agora/")


def test_from_airflow_takes_the_s3_endpoint_of_the_airflow_connection(
    moto: MotoServer, files: RemoteFiles, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoints = {"batch": {"endpoint_url": moto.url}, "s3": {"endpoint_url": moto.url}}
    connection = {
        "conn_type": "aws",
        "login": "AKIDAGORAS3",
        "password": "secret",
        "extra": {"region_name": REGION, "endpoint_url": "http://not-this-one:1", "service_config": endpoints},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AGORA_S3", json.dumps(connection))
    backend = AwsBatchBackend.from_airflow("agora_s3", s3_prefix=prefix)
    assert backend.files is not None and backend.files.client.meta.endpoint_url == moto.url
    url = job_urls(prefix, "k").workload
    backend.files.write(url, b"{}")
    assert files.read(url) == b"{}"
    assert AwsBatchBackend.from_airflow("agora_s3").files is None  # no prefix: no S3 at all


# -- the executor ----------------------------------------------------------------------------


def workload(task_id: str) -> Any:
    from airflow.executors.workloads import ExecuteTask
    from airflow.executors.workloads.base import BundleInfo
    from airflow.executors.workloads.task import TaskInstanceDTO

    placement = {"resource": "c5.large", "cores": 1, "memory_bytes": GIB}
    ti = TaskInstanceDTO(
        id=uuid.uuid4(), dag_version_id=uuid.uuid4(), task_id=task_id, dag_id="unit", run_id="r1", try_number=1,
        map_index=-1, pool_slots=1, priority_weight=1, queue="default",
        executor_config={"agora": {"placement": placement}},
    )  # fmt: skip
    return ExecuteTask(
        ti=ti, dag_rel_path="unit.py", token=TOKEN, log_path=None, bundle_info=BundleInfo(name="dags-folder")
    )


@pytest.fixture
def aws_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str, s3_backend: AwsBatchBackend) -> Any:
    """An executor whose AWS backend is ``s3_backend`` (on moto, through S3 under ``prefix``)."""
    from agora_optimizer.executor.agora_executor import AgoraExecutor
    from agora_optimizer.executor.backends.registry import register_backend, unregister_backend

    previous = register_backend("aws", lambda resources: s3_backend)
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(AWS_CATALOG))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_S3_PREFIX", prefix)
    monkeypatch.setenv("AIRFLOW__AGORA__TOKEN_REFRESH_S", "0")
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", JWT_SECRET)
    executor = AgoraExecutor()
    try:
        executor.start()
    finally:
        unregister_backend("aws", previous)
    return executor


def test_the_executor_passes_an_aws_task_its_workload_and_result_through_s3(
    aws_executor: Any, files: RemoteFiles, prefix: str, batch: Any
) -> None:
    from airflow.utils.state import TaskInstanceState

    item = workload("t")
    hand_over(aws_executor, [item])
    job = aws_executor.jobs[item.ti.key]
    key = job_key("unit", "t", "r1", 1, -1)
    urls = job_urls(prefix, key)
    command = list(job.spec.command)
    assert command[:5] == ["python", "-m", "agora_optimizer.executor.worker", "--job-dir", f"/tmp/agora/{key}"]
    assert (option(command, "--workload-url"), option(command, "--result-url")) == (urls.workload, urls.result)
    assert TOKEN not in json.dumps([command, dict(job.spec.environment)])
    [described] = batch.describe_jobs(jobs=[job.external_id])["jobs"]
    assert described["container"]["command"] == command and TOKEN not in json.dumps(described)
    assert json.loads(files.read(urls.workload))["token"] == TOKEN

    aws_executor.tokens.renew(job)  # as for a job still waiting in its queue
    renewed = json.loads(files.read(urls.workload))["token"]
    assert renewed != TOKEN and renewed.count(".") == 2  # a signed JWT from Airflow's generator
    assert renewed == json.loads(job.spec.workload_path.read_text())["token"]

    files.write(urls.result, OOM.to_json().encode())  # the worker killed the task for its memory
    aws_executor.sync()
    state, info = aws_executor.get_event_buffer()[item.ti.key]
    assert (
        state == TaskInstanceState.FAILED
        and "unit.t run r1 try 1 on c5.large out of memory: out of memory: peak RSS" in info
    )


def test_an_aws_task_without_an_s3_prefix_fails_naming_the_setting_and_the_task(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor.agora_executor import AgoraExecutor

    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(AWS_CATALOG))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.delenv("AIRFLOW__AGORA__AWS_S3_PREFIX", raising=False)
    executor = AgoraExecutor()
    with caplog.at_level(logging.WARNING):
        executor.start()  # said once, at start
    said = caplog.text + capsys.readouterr().out  # once Airflow's logging is set up, its handler prints the record
    assert "[agora] aws_s3_prefix is not set: every task on them will fail" in said
    item = workload("t")
    hand_over(executor, [item])
    state, info = executor.get_event_buffer()[item.ti.key]
    assert state == TaskInstanceState.FAILED
    assert info.startswith("task unit.t: resource c5.large runs on AWS Batch") and "set [agora] aws_s3_prefix" in info


def test_the_worker_of_an_aws_job_runs_in_the_container_with_its_files_in_s3() -> None:
    prefix = "s3://agora-jobs/agora/"
    backend = AwsBatchBackend(region_name=REGION, s3_prefix=prefix)  # no AWS call: a command is only words
    command = backend.worker_command(Path("/jobs/k"), "c5.large", memory_bytes=GIB, time_limit_s=60, label="d.t")
    urls = job_urls(prefix, "k")
    assert command == [
        "python", "-m", "agora_optimizer.executor.worker", "--job-dir", "/tmp/agora/k",
        "--workload-url", urls.workload, "--result-url", urls.result, "--memory-bytes", str(GIB),
        "--time-limit-s", "60",
    ]  # fmt: skip
    with pytest.raises(AgoraError, match=r"^task d.t: resource c5.large runs on AWS Batch.*set \[agora\] aws_s3"):
        AwsBatchBackend(region_name=REGION).worker_command(
            Path("/jobs/k"), "c5.large", memory_bytes=GIB, time_limit_s=None, label="d.t"
        )


def test_the_worker_imports_boto3_only_when_it_exchanges_files_through_s3() -> None:
    check = "import sys, agora_optimizer.executor.worker.worker; assert 'boto3' not in sys.modules, 'boto3 imported'"
    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)
