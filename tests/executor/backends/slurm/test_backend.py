"""The SLURM backend on the real loopback cluster: placement, limits, results, cancel, refusals,
adoption by a new instance, pilots, and a controller that is down or silent."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.slurm import SlurmBackend, SlurmJobRef, job_name, pilot
from agora_optimizer.executor.backends.slurm.status import active_status, final_status
from agora_optimizer.executor.backends.slurm.submission import JOB_NAME_MAX
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus, read_result
from agora_optimizer.slurm.commands import run_slurm
from agora_optimizer.slurm.jobs import SlurmRecord
from tests.slurm_cluster import NODES, SlurmCluster, cluster_state, wait_until
from tests.slurm_fixtures import Tracked

MIB = 2**20
SLEEP = "import time; time.sleep({})"


def job(
    tmp_path: Path,
    name: str,
    code: str = "pass",
    *,
    partition: str | None = "debug",
    cores: int = 1,
    memory_mib: int = 200,
    worker_memory_mib: int | None = None,
    time_limit_s: float | None = 60.0,
    environment: Mapping[str, str] | None = None,
) -> JobSpec:
    """A job running ``code`` under the agora worker, in its own directory under ``tmp_path``."""
    job_dir = tmp_path / name
    limit = (worker_memory_mib or memory_mib) * MIB
    worker = [sys.executable, "-m", "agora_optimizer.executor.worker", "--job-dir", str(job_dir)]
    return JobSpec(
        key=f"{tmp_path.name}-{name}",
        label=f"dag.{name}",
        resource=f"slurm-{partition}",
        cores=cores,
        memory_bytes=memory_mib * MIB,
        time_limit_s=time_limit_s,
        command=(*worker, "--memory-bytes", str(limit), "--", sys.executable, "-c", code),
        job_dir=job_dir,
        options={} if partition is None else {"partition": partition},
        environment=environment or {},
    )


def wait_finished(backend: SlurmBackend, ids: Sequence[str], timeout_s: float = 60) -> Mapping[str, JobStatus]:
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = backend.status(ids)
        if all(status.phase in ("finished", "lost") for status in statuses.values()):
            return statuses
        if time.monotonic() > deadline:
            pytest.fail(f"jobs did not finish in {timeout_s:g} s: {statuses}\n{cluster_state()}")
        time.sleep(0.3)


def show_job(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (SLURM's own record of the request)."""
    fields: dict[str, str] = {}
    for token in run_slurm(["scontrol", "show", "job", "--oneliner", job_id]).split():
        key, _, value = token.partition("=")
        fields.setdefault(key, value)
    return fields


def accounting(job_id: str) -> dict[str, str]:
    """sacct's row of the allocation, once it has the job's final state."""
    names = ("State", "NodeList", "Partition", "AllocCPUS", "JobName")
    row: dict[str, str] = {}

    def final() -> bool:  # slurmdbd gets a job's record in parts: wait for all of it
        out = run_slurm(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", ",".join(names)]).strip()
        row.update(zip(names, out.split("|"), strict=False) if out else {})
        ended = row.get("State", "").split(" ")[0] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
        return ended and all(row.get(name) for name in names) and row["JobName"] != "allocation"

    wait_until(final, 30, f"sacct to report job {job_id} as ended")
    return row


# -- without a cluster: SLURM's answers and our names ---------------------------------------------


@pytest.mark.parametrize(
    ("state", "exit_code", "oom_killed", "words"),
    [
        ("TIMEOUT", 143, False, "time limit"),
        ("OUT_OF_MEMORY", 137, True, "memory"),
        ("NODE_FAIL", 137, False, "node"),
        ("CANCELLED", 143, False, "cancelled"),
        ("FAILED", 1, False, "failed"),
    ],
)
def test_slurm_final_states_without_a_result_finish_with_a_nonzero_code(
    state: str, exit_code: int, oom_killed: bool, words: str
) -> None:
    record = SlurmRecord("5", state, node="agora-large", exit_code=0, max_rss_bytes=10)
    status = final_status("SLURM job 5", record, None, "the worker wrote no result.json")
    assert (status.phase, status.exit_code, status.oom_killed) == ("finished", exit_code, oom_killed)
    assert words in status.reason and "result.json" in status.reason and status.peak_rss_bytes == 10
    assert active_status(SlurmRecord("5", "WEIRD")).phase == "pending"  # polled again, not lost


def test_ids_and_job_names() -> None:
    assert SlurmJobRef.parse("123") == SlurmJobRef("123")
    assert SlurmJobRef.parse("123+4") == SlurmJobRef("123", 4) and str(SlurmJobRef("123", 4)) == "123+4"
    assert SlurmJobRef.parse("abc") is None and SlurmJobRef.parse("1+x") is None
    long = job_name("d" * 300)
    assert len(long) == JOB_NAME_MAX and long != job_name("d" * 299)
    assert job_name("dag__task__run:1 x") == "agora-dag__task__run_1_x"


def test_bad_configuration_fails_when_the_backend_is_built() -> None:
    with pytest.raises(Exception, match="pilot_window_s"):
        SlurmBackend(pilot_window_s=-1)
    with pytest.raises(Exception, match="export"):
        SlurmBackend(export=["PATH", "not a name"])


# -- on the cluster -------------------------------------------------------------------------------


def test_jobs_land_on_their_partition_and_node_type_with_their_limits(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend()
    small = job(tmp_path, "small", SLEEP.format(1), cores=2, memory_mib=300, time_limit_s=90, environment={"X": "a,b"})
    large = job(tmp_path, "large", SLEEP.format(1), partition="compute", cores=3, memory_mib=1000, time_limit_s=None)
    ids = {name: tracked.submit(backend, spec) for name, spec in (("small", small), ("large", large))}
    shown = {name: show_job(job_id) for name, job_id in ids.items()}
    assert shown["small"]["Partition"] == "debug" and shown["large"]["Partition"] == "compute"
    assert (shown["small"]["NumCPUs"], shown["small"]["MinMemoryNode"]) == ("2", "300M")
    assert (shown["large"]["NumCPUs"], shown["large"]["MinMemoryNode"]) == ("3", "1000M")
    assert shown["small"]["TimeLimit"] == "00:02:00"  # 90 s + 30 s grace, in whole minutes
    assert shown["large"]["TimeLimit"] == "1-00:00:00"  # none: the partition's default (its MaxTime)
    assert shown["small"]["JobName"] == job_name(small.key) and shown["small"]["WorkDir"] == str(small.job_dir)
    assert shown["small"]["StdOut"] == f"{small.job_dir}/slurm-{ids['small']}.log"
    statuses = wait_finished(backend, list(ids.values()))
    for name, node in (("small", NODES["debug"]), ("large", NODES["compute"])):
        status = statuses[ids[name]]
        assert status.succeeded, status
        assert status.host == node.name
        assert status.queued_at and status.started_at and status.ended_at
        assert status.queued_at <= status.started_at <= status.ended_at
        assert status.peak_rss_bytes and status.peak_rss_bytes > 0
        row = accounting(ids[name])
        assert (row["NodeList"], row["Partition"]) == (node.name, node.partition)
    assert (small.job_dir / "job.sbatch").read_text().startswith("#!/bin/bash")


def test_the_environment_reaches_the_job_whole(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend()
    code = "import os, sys; sys.exit(0 if os.environ['AGORA_T'] == 'a,b=c d' else 5)"
    spec = job(tmp_path, "env", code, environment={"AGORA_T": "a,b=c d"})
    job_id = tracked.submit(backend, spec)
    assert wait_finished(backend, [job_id])[job_id].exit_code == 0


SCHEDULER_SECRETS = {
    "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",  # deprecated, still read by Airflow
    "AIRFLOW__WEBSERVER__SECRET_KEY_CMD": "cat /secret/key",
}


def test_no_scheduler_secret_reaches_a_job_or_a_pilot_task(tmp_path: Path, tracked: Tracked) -> None:
    code = "import json, os; json.dump(sorted(os.environ), open('environment.json', 'w'))"
    environment = {**SCHEDULER_SECRETS, "AGORA_KEPT": "1"}
    single = tracked.submit(SlurmBackend(), job(tmp_path, "alone", code, environment=environment))
    pilots = SlurmBackend(pilot_max_tasks=2, pilot_window_s=60)
    packed = [tracked.submit(pilots, job(tmp_path, f"packed{i}", code, environment=environment)) for i in range(2)]
    assert all(s.succeeded for s in wait_finished(pilots, packed).values())
    assert wait_finished(SlurmBackend(), [single])[single].succeeded
    for name in ("alone", "packed0", "packed1"):
        seen = set(json.loads((tmp_path / name / "environment.json").read_text()))
        assert "AGORA_KEPT" in seen and not set(SCHEDULER_SECRETS) & seen, name
    pilot_dir = next(tmp_path.glob("pilot-*"))
    task_files = sorted(pilot_dir.glob("task.*.sh"))
    assert len(task_files) == 2 and all("SQL_ALCHEMY_CONN" not in f.read_text() for f in task_files)


def test_an_exit_code_and_an_oom_kill_come_back_from_the_worker(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend()
    failing = tracked.submit(backend, job(tmp_path, "fail", "raise SystemExit(7)"))
    hungry = tracked.submit(
        backend,
        job(
            tmp_path,
            "oom",
            "x = bytearray(400 * 2**20); import time; time.sleep(5)",
            memory_mib=600,
            worker_memory_mib=150,
        ),
    )
    statuses = wait_finished(backend, [failing, hungry])
    assert (statuses[failing].phase, statuses[failing].exit_code) == ("finished", 7)
    assert "exited with code 7" in statuses[failing].reason
    oom = statuses[hungry]
    assert oom.oom_killed and oom.exit_code == 137 and "out of memory" in oom.reason
    assert oom.peak_rss_bytes is not None and oom.peak_rss_bytes > 150 * MIB
    result = read_result(tmp_path / "oom" / "result.json")
    assert result is not None and result.oom_killed


def test_a_job_without_a_worker_is_reported_from_slurm_records_alone(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend()
    spec = job(tmp_path, "raw", memory_mib=400)
    code = "x = bytearray(150 * 2**20); import time; time.sleep(2); raise SystemExit(2)"
    spec = JobSpec(**{**spec.__dict__, "command": (sys.executable, "-c", code)})
    job_id = tracked.submit(backend, spec)
    status = wait_finished(backend, [job_id])[job_id]
    assert status.exit_code == 2 and "wrote no" in status.reason and status.host == NODES["debug"].name
    assert (
        status.peak_rss_bytes is not None and status.peak_rss_bytes > 150 * MIB
    )  # sacct's MaxRSS (jobacct_gather/linux)


def test_cancel_stops_a_running_job_and_never_raises(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend()
    job_id = tracked.submit(backend, job(tmp_path, "long", SLEEP.format(60)))
    wait_until(lambda: backend.status([job_id])[job_id].phase == "running", 30, "the job to run")
    backend.cancel(job_id)
    status = wait_finished(backend, [job_id])[job_id]
    assert status.exit_code == 143 and "cancel" in status.reason
    assert accounting(job_id)["State"].startswith("CANCELLED")
    backend.cancel(job_id)  # again, after the end
    backend.cancel("not-an-id")
    backend.cancel("999999999")


@pytest.mark.parametrize(
    ("options", "memory_mib", "cores", "message"),
    [
        ({"partition": "gpu"}, 100, 1, "Invalid partition"),
        ({"partition": "debug"}, NODES["debug"].memory_mib + 1024, 1, "node configuration is not available"),
        ({"partition": "debug"}, 100, NODES["debug"].cpus + 1, "More processors requested than permitted"),
        ({}, 100, 1, "no SLURM partition"),
    ],
)
def test_a_refused_submit_names_the_resource_and_leaves_no_job(
    tmp_path: Path, slurm_cluster: SlurmCluster, options: dict[str, str], memory_mib: int, cores: int, message: str
) -> None:
    spec = job(tmp_path, "refused", memory_mib=memory_mib, cores=cores)
    spec = JobSpec(**{**spec.__dict__, "options": options, "resource": "slurm-odd"})
    with pytest.raises(BackendError, match=message) as caught:
        SlurmBackend().submit(spec)
    assert not caught.value.transient
    assert "'slurm-odd'" in str(caught.value) and "dag.refused" in str(caught.value)
    assert run_slurm(["squeue", "--noheader", f"--name={job_name(spec.key)}"]).strip() == ""


def test_a_new_instance_reports_on_and_cancels_jobs_another_one_submitted(tmp_path: Path, tracked: Tracked) -> None:
    first = SlurmBackend(pilot_max_tasks=2, pilot_window_s=30)
    done = tracked.submit(first, job(tmp_path, "done", "raise SystemExit(4)", time_limit_s=None))
    packed = [tracked.submit(first, job(tmp_path, f"packed{i}", f"raise SystemExit({10 + i})")) for i in range(2)]
    running = tracked.submit(first, job(tmp_path, "running", SLEEP.format(60), time_limit_s=None))
    wait_finished(first, [done, *packed])
    del first
    second = SlurmBackend()  # knows nothing: job directories come from SLURM's WorkDir
    # A packed task that failed is reported once SLURM has ended its allocation (while it is COMPLETING, a
    # failure may yet be a preemption): the first instance may have seen it end before, the second waits too.
    statuses = wait_finished(second, [done, *packed])
    assert statuses[done].exit_code == 4 and "exited with code 4" in statuses[done].reason
    assert [statuses[i].exit_code for i in packed] == [10, 11]
    wait_until(lambda: second.status([running])[running].phase == "running", 30, "the job to run")
    second.cancel(running)
    assert wait_finished(second, [running])[running].exit_code == 143
    third = SlurmBackend()
    assert third.adopt(done, tmp_path / "done") and not third.adopt("x", tmp_path)
    assert third.status([done])[done].exit_code == 4
    assert third.status(["999999999"])["999999999"].phase == "lost"


def test_a_pilot_packs_five_short_jobs_into_one_slurm_job(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend(pilot_max_tasks=5, pilot_window_s=30)
    specs = [
        job(tmp_path, f"t{i}", "import os, sys; sys.exit(int(os.environ['N']))", partition="compute", cores=2,
            memory_mib=300, time_limit_s=60, environment={"N": str(i)})
        for i in range(5)
    ]  # fmt: skip
    ids = [tracked.submit(backend, spec) for spec in specs]
    slurm_ids = {SlurmJobRef.parse(i).job_id for i in ids}  # type: ignore[union-attr]
    assert len(slurm_ids) == 1 and ids == [f"{next(iter(slurm_ids))}+{i}" for i in range(5)]
    (slurm_id,) = slurm_ids
    shown = show_job(slurm_id)
    assert (shown["NumCPUs"], shown["MinMemoryNode"], shown["TimeLimit"]) == ("10", "1500M", "00:02:00")
    statuses = wait_finished(backend, ids)
    assert [statuses[i].exit_code for i in ids] == [0, 1, 2, 3, 4]
    for spec, external_id in zip(specs, ids, strict=True):
        result = read_result(spec.result_path)
        assert result is not None and result.exit_code == statuses[external_id].exit_code
        assert statuses[external_id].host == NODES["compute"].name
    row = accounting(slurm_id)
    assert (row["AllocCPUS"], row["Partition"]) == ("10", "compute")
    assert row["JobName"] == job_name(f"pilot-{specs[0].key}")


# The task under a worker that is killed: like Airflow's supervisor, it starts the task's process in a
# process group of its own; then the worker dies by SIGKILL, and both would run on, orphaned.
ORPHANING = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], process_group=0)
open("orphans", "w").write(f"{{os.getpid()}} {{child.pid}}")
time.sleep(1)
os.kill({worker}, signal.SIGKILL)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


@pytest.mark.parametrize("pilot", [False, True], ids=["one-job", "pilot"])
def test_a_killed_workers_task_is_gone_when_its_job_is_reported_ended(
    tmp_path: Path, tracked: Tracked, pilot: bool
) -> None:
    """Airflow retries the task once the job is reported failed: the killed try must not run beside the retry."""
    backend = SlurmBackend(pilot_max_tasks=2, pilot_window_s=1) if pilot else SlurmBackend()
    spec = job(tmp_path, "victim", ORPHANING.format(worker="os.getppid()"), time_limit_s=300)
    job_id = tracked.submit(backend, spec)
    orphans = spec.job_dir / "orphans"
    wait_until(lambda: bool(backend.status([job_id])) and orphans.exists(), 60, "the task to start its child")
    status = wait_finished(backend, [job_id], timeout_s=90)[job_id]
    assert status.exit_code != 0 and "SIGKILL" in status.reason, status
    left = [pid for pid in map(int, orphans.read_text().split()) if _alive(pid)]
    assert left == [], f"processes of the killed worker's task still ran when the job was reported ended: {left}"


def test_a_pilot_gathers_for_its_window_and_cancels_one_task_alone(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend(pilot_max_tasks=10, pilot_window_s=2)
    long = tracked.submit(backend, job(tmp_path, "long", SLEEP.format(60)))
    short = tracked.submit(backend, job(tmp_path, "short", SLEEP.format(2)))
    alone = tracked.submit(backend, job(tmp_path, "alone", "pass", time_limit_s=1200))  # too long to pack
    assert long.split("+")[0] == short.split("+")[0] != alone and "+" not in alone
    waiting = backend.status([long])[long]
    assert waiting.phase == "pending" and "gathering" in waiting.reason

    def long_runs() -> bool:  # the worker has started (and set its signal handlers) once task.log exists
        return backend.status([long])[long].phase == "running" and (tmp_path / "long" / "task.log").exists()

    wait_until(long_runs, 30, "the pilot to be released and its task to run")
    backend.cancel(long)
    statuses = wait_finished(backend, [long, short, alone])
    assert statuses[long].exit_code == 143 and "cancel" in statuses[long].reason
    assert statuses[short].succeeded and statuses[alone].succeeded
    assert statuses[short].ended_at and statuses[long].ended_at  # the pilot ran on for the short task


def test_a_job_that_would_overfill_the_node_starts_a_new_pilot(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend(pilot_max_tasks=10, pilot_window_s=30)
    cpus = NODES["debug"].cpus
    first = [tracked.submit(backend, job(tmp_path, f"f{i}", "pass", cores=cpus // 2)) for i in range(2)]
    second = tracked.submit(backend, job(tmp_path, "s", "pass", cores=1))  # the first pilot holds every core
    assert first[0].split("+")[0] == first[1].split("+")[0] != second.split("+")[0] and second.endswith("+0")
    assert show_job(first[0].split("+")[0])["Reason"] != "JobHeldUser"  # closed and released at once
    backend.tick(force=True)  # the scheduler stops: every open pilot goes now
    statuses = wait_finished(backend, [*first, second])
    assert all(status.succeeded for status in statuses.values()), statuses


def test_a_held_pilot_whose_gatherer_died_is_released_by_another_instance(
    tmp_path: Path, tracked: Tracked, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pilot, "ADOPTED_RELEASE_GRACE_S", 0.0)
    dead = SlurmBackend(pilot_max_tasks=5, pilot_window_s=1)
    orphan = tracked.submit(dead, job(tmp_path, "orphan", "pass"))
    del dead  # never polled again: its pilot stays held
    time.sleep(1.2)
    assert show_job(orphan.split("+")[0])["Reason"] == "JobHeldUser"
    assert wait_finished(SlurmBackend(), [orphan])[orphan].succeeded


def test_all_tasks_of_a_pending_pilot_cancelled_cancels_the_allocation(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend(pilot_max_tasks=5, pilot_window_s=60)
    ids = [tracked.submit(backend, job(tmp_path, f"c{i}", "pass")) for i in range(2)]
    for external_id in ids:
        backend.cancel(external_id)
    statuses = backend.status(ids)
    assert all(s.phase == "finished" and s.exit_code == 143 for s in statuses.values()), statuses
    assert accounting(ids[0].split("+")[0])["State"].startswith("CANCELLED")


@pytest.mark.usefixtures("controller_down")
def test_a_controller_that_is_down_is_a_transient_error(tmp_path: Path) -> None:
    backend = SlurmBackend()
    with pytest.raises(BackendError, match=r"slurm-debug.*Unable to contact slurm controller") as caught:
        backend.submit(job(tmp_path, "down"))
    assert caught.value.transient
    with pytest.raises(BackendError) as caught:
        backend.status(["1", "2+0"])
    assert caught.value.transient
    backend.cancel("1")


@pytest.fixture
def silent_controller(slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A controller port that accepts connections and never answers, with a long MessageTimeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    lines = [line for line in slurm_cluster.conf.read_text().splitlines() if not line.startswith("SlurmctldPort=")]
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join([*lines, f"SlurmctldPort={port}", "MessageTimeout=60"]) + "\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    yield
    listener.close()


@pytest.mark.usefixtures("silent_controller")
def test_a_silent_controller_times_out_instead_of_hanging(tmp_path: Path) -> None:
    backend = SlurmBackend(command_timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(BackendError, match=r"no answer within 1\.5 s") as caught:
        backend.status(["1"])
    assert caught.value.transient and time.monotonic() - started < 10
    with pytest.raises(BackendError, match="may exist") as caught:
        backend.submit(job(tmp_path, "silent"))
    assert caught.value.transient and time.monotonic() - started < 10


def test_a_submit_that_timed_out_is_found_by_name_not_submitted_twice(
    tmp_path: Path, tracked: Tracked, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SlurmBackend()
    spec = job(tmp_path, "twice", "pass")
    real_run = subprocess.run

    def slow_sbatch(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        done = real_run(argv, **kwargs)  # type: ignore[call-overload]
        if argv[0] == "sbatch":
            tracked.ids.add(done.stdout.strip())
            raise subprocess.TimeoutExpired(argv, 1.0)
        return done  # type: ignore[no-any-return]

    monkeypatch.setattr(subprocess, "run", slow_sbatch)
    with pytest.raises(BackendError, match="may exist") as caught:
        backend.submit(spec)
    assert caught.value.transient
    monkeypatch.setattr(subprocess, "run", real_run)
    job_id = backend.submit(spec)
    assert {job_id} == tracked.ids
    assert wait_finished(backend, [job_id])[job_id].succeeded


def submit_as_nobody(name: str) -> str:
    """A held job of user nobody named ``name`` (as root, sbatch submits for another user)."""
    argv = ["sbatch", "--parsable", "--uid=nobody", "--hold", f"--job-name={name}", "--partition=debug"]
    return run_slurm([*argv, "--output=/dev/null", "--chdir=/tmp", "--wrap", "sleep 1"]).strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="submitting a job as another user needs root (sbatch --uid)")
def test_a_timed_out_submit_never_adopts_another_users_job_of_the_same_name(
    tmp_path: Path, tracked: Tracked, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SlurmBackend()
    spec = job(tmp_path, "namesake", "pass")
    name = job_name(spec.key)
    theirs = submit_as_nobody(name)
    tracked.ids.add(theirs)
    real_run = subprocess.run

    def lost_sbatch(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        if argv[0] == "sbatch":  # no answer, and (unlike a slow controller) no job either
            raise subprocess.TimeoutExpired(argv, 1.0)
        return real_run(argv, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "run", lost_sbatch)
    with pytest.raises(BackendError, match="may exist"):
        backend.submit(spec)
    monkeypatch.setattr(subprocess, "run", real_run)
    job_id = tracked.submit(backend, spec)
    assert job_id != theirs  # looked up by name among this user's jobs only: submitted anew
    assert wait_finished(backend, [job_id])[job_id].succeeded
    assert show_job(theirs)["JobState"] == "PENDING"  # theirs untouched


@pytest.mark.skipif(os.geteuid() != 0, reason="submitting a job as another user needs root (sbatch --uid)")
def test_a_pilot_whose_submit_timed_out_cancels_no_other_users_job_of_its_name(
    tmp_path: Path, tracked: Tracked, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SlurmBackend(pilot_max_tasks=2, pilot_window_s=30)
    spec = job(tmp_path, "pilotsake", "pass")
    theirs = submit_as_nobody(job_name(f"pilot-{spec.key}"))
    tracked.ids.add(theirs)
    real_run = subprocess.run

    def lost_sbatch(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        if argv[0] == "sbatch":
            raise subprocess.TimeoutExpired(argv, 1.0)
        return real_run(argv, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(subprocess, "run", lost_sbatch)
    with pytest.raises(BackendError, match="may exist"):
        backend.submit(spec)  # agora cancels the held pilot its sbatch may have made, by name: only its own
    monkeypatch.setattr(subprocess, "run", real_run)
    assert show_job(theirs)["JobState"] == "PENDING"


def test_a_backend_that_forgot_a_job_directory_finds_it_again_from_slurm(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend(remember_max=1)
    first = tracked.submit(backend, job(tmp_path, "first", "raise SystemExit(3)"))
    second = tracked.submit(backend, job(tmp_path, "second", "pass"))
    assert len(backend.directories) == 1  # bounded: the first job's directory is forgotten
    statuses = wait_finished(backend, [first, second])
    assert statuses[first].exit_code == 3 and statuses[second].succeeded
    assert statuses[first].reason == "exited with code 3"  # the worker's own result, its directory found via WorkDir
