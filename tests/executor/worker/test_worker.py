"""The agora worker, run as the backends run it: a subprocess with limits, writing a result file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agora_optimizer.executor.jobs.spec import OOM_EXIT_CODE, BackendError, read_result

HOLD = "import time; b = bytearray({n} * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep({s})"


def worker(job_dir: Path, *options: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "agora_optimizer.executor.worker",
            "--job-dir",
            str(job_dir),
            *options,
            "--",
            sys.executable,
            "-c",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_task_over_its_memory_is_killed_and_recorded_as_oom(tmp_path: Path) -> None:
    done = worker(tmp_path, "--memory-bytes", str(100 * 2**20), command=HOLD.format(n=300, s=5) + "; print('survived')")
    result = read_result(tmp_path / "result.json")
    assert result is not None
    assert done.returncode == OOM_EXIT_CODE == result.exit_code
    assert result.oom_killed and "out of memory" in result.reason and str(100 * 2**20) in result.reason
    assert result.peak_rss_bytes > 100 * 2**20
    assert "survived" not in (tmp_path / "task.log").read_text()
    assert (result.ended_at - result.started_at).total_seconds() < 4  # killed, not waited for


def test_a_task_within_its_memory_runs_to_the_end_and_its_peak_is_measured(tmp_path: Path) -> None:
    done = worker(tmp_path, "--memory-bytes", str(400 * 2**20), command=HOLD.format(n=150, s=0.5) + "; print('ok')")
    result = read_result(tmp_path / "result.json")
    assert done.returncode == 0 and result is not None and not result.oom_killed and result.exit_code == 0
    assert 150 * 2**20 <= result.peak_rss_bytes <= 400 * 2**20
    assert "ok" in (tmp_path / "task.log").read_text()


def test_the_exit_code_of_a_failing_command_is_kept(tmp_path: Path) -> None:
    done = worker(tmp_path, command="raise SystemExit(3)")
    result = read_result(tmp_path / "result.json")
    assert done.returncode == 3 and result is not None and result.exit_code == 3 and "code 3" in result.reason


@pytest.mark.slow  # waits on a real task for seconds
def test_a_task_past_its_time_limit_is_terminated(tmp_path: Path) -> None:
    started = time.monotonic()
    done = worker(tmp_path, "--time-limit-s", "1", command="import time; time.sleep(30)")
    result = read_result(tmp_path / "result.json")
    assert result is not None and result.timed_out and "time limit" in result.reason
    assert done.returncode != 0 and time.monotonic() - started < 15


def test_the_task_runs_on_the_cpus_of_its_pool(tmp_path: Path) -> None:
    worker(tmp_path, "--cpu-set", "0", command="import os; print(sorted(os.sched_getaffinity(0)))")
    assert (tmp_path / "task.log").read_text().strip() == "[0]"


def test_the_task_is_told_that_the_worker_samples_it(tmp_path: Path) -> None:
    worker(tmp_path, command="import os; print('sampled by worker:', os.environ.get('AGORA_SAMPLED_BY_WORKER'))")
    assert (tmp_path / "task.log").read_text().strip() == "sampled by worker: 1"  # the listener leaves it to us


def test_a_cpu_set_the_machine_lacks_is_a_clear_error(tmp_path: Path) -> None:
    done = worker(tmp_path, "--cpu-set", "4096", command="print(1)")
    assert done.returncode == 2 and "cannot pin to CPUs '4096'" in done.stderr


@pytest.mark.slow  # waits on a real task for seconds
def test_sigterm_to_the_worker_cancels_the_task_and_is_recorded(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agora_optimizer.executor.worker",
            "--job-dir",
            str(tmp_path),
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(30)",
        ]
    )
    time.sleep(1.5)
    process.send_signal(signal.SIGTERM)
    assert process.wait(20) != 0
    result = read_result(tmp_path / "result.json")
    assert result is not None and "cancelled" in result.reason


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "unreadable"),
        (json.dumps({"format": "other/1"}), "format"),
        (json.dumps({"format": "agora-job-result/1"}), "malformed"),
    ],
)
def test_a_corrupt_result_file_is_a_clear_error_naming_it(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "result.json"
    path.write_text(content)
    with pytest.raises(BackendError, match=message) as caught:
        read_result(path)
    assert str(path) in str(caught.value) and not caught.value.transient


def test_no_result_file_yet_reads_as_none(tmp_path: Path) -> None:
    assert read_result(tmp_path / "result.json") is None


def test_a_task_the_worker_never_saw_is_measured_by_the_kernel(tmp_path: Path) -> None:
    # Airflow's entry on a workload it cannot read ends before it forks a task process: the
    # worker has nothing to follow, as when a tiny task begins and ends between two looks.
    (tmp_path / "workload.json").write_text("{not a workload")
    done = subprocess.run(
        [sys.executable, "-m", "agora_optimizer.executor.worker", "--job-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    result = read_result(tmp_path / "result.json")
    assert result is not None and done.returncode == result.exit_code != 0
    assert result.peak_rss_bytes > 30 * 2**20  # the supervisor's process, with Airflow imported
    assert result.cpu_time_s > 0.1
