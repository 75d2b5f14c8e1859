"""The state directory may be shared: agora writes there without following a planted symlink."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from agora_optimizer.errors import InputFileError
from agora_optimizer.executor.backends.slurm.pilot_files import Pilot, PilotTask
from agora_optimizer.executor.jobs.spec import read_result
from agora_optimizer.executor.state_files import check_state_dir, write_private
from agora_optimizer.executor.worker import worker

SECRET_LINE = "run_task 0 /jobs/x env -- AIRFLOW__AGORA__TRACE_STORE_URL=postgresql://agora:pw@db/traces ...\n"


def plant(link: Path, target: Path) -> None:
    link.symlink_to(target)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another file of the user, which a planted symlink points to."""
    path = tmp_path / "victim" / "authorized_keys"
    path.parent.mkdir()
    path.write_text("ssh-ed25519 AAAA... the user's key\n")
    return path


def test_a_private_write_replaces_planted_symlinks_and_never_writes_through_them(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "tasks.sh"
    plant(tmp_path / "tasks.sh.partial", victim)  # where the old writer put its temporary file
    plant(target, victim)
    write_private(target, SECRET_LINE)
    assert victim.read_text() == "ssh-ed25519 AAAA... the user's key\n"
    info = os.lstat(target)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert target.read_text() == SECRET_LINE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tasks.sh", "tasks.sh.partial", "victim"]


def test_a_private_write_has_its_mode_whatever_the_umask_and_leaves_nothing_when_it_fails(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_private(tmp_path / "job.sbatch", "#!/bin/bash\n", mode=0o700)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "job.sbatch").st_mode) == 0o700
    (tmp_path / "taken").mkdir()
    with pytest.raises(OSError):
        write_private(tmp_path / "taken", "x")  # a directory cannot be replaced by a file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.sbatch", "taken"]


def test_a_slurm_pilot_writes_its_task_lines_past_planted_symlinks(tmp_path: Path, victim: Path) -> None:
    for name in ("task.0.sh.partial", "task.0.sh", "pilot.json.partial"):
        plant(tmp_path / name, victim)
    pilot = Pilot("debug", tmp_path, minutes=5, release_at=0.0)
    task = PilotTask(0, "k", "dag.t run r try 1", "slurm-debug", tmp_path / "job", 1, 64, 5, "run_task 0 ...\n")
    pilot.write([task])
    assert victim.read_text() == "ssh-ed25519 AAAA... the user's key\n"
    for name in ("task.0.sh", "pilot.json"):
        assert not (tmp_path / name).is_symlink() and stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600
    assert (tmp_path / "task.0.sh").read_text() == "run_task 0 ...\n"


def test_the_worker_refuses_a_log_that_is_a_symlink(tmp_path: Path, victim: Path) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    plant(job_dir / "task.log", victim)
    code = worker.main(["--job-dir", str(job_dir), "--", sys.executable, "-c", "print('task output')"])
    assert victim.read_text() == "ssh-ed25519 AAAA... the user's key\n"
    result = read_result(job_dir / "result.json")
    assert code == 1 and result is not None and result.exit_code == 1
    assert "cannot open its log" in result.reason and str(job_dir / "task.log") in result.reason


def test_a_state_dir_others_may_write_or_not_the_users_own_is_refused_naming_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "jobs"
    state_dir.mkdir(mode=0o755)
    check_state_dir(state_dir)  # the user's own, written by no one else
    state_dir.chmod(0o777)
    with pytest.raises(InputFileError, match="may be written by its group or by others") as refused:
        check_state_dir(state_dir)
    assert str(state_dir) in str(refused.value)
    state_dir.chmod(0o755)
    link = tmp_path / "link"
    link.symlink_to(state_dir)
    with pytest.raises(InputFileError, match="is a symlink"):
        check_state_dir(link)
    if os.geteuid() == 0:  # as root the directory can be given to another user
        os.chown(state_dir, 65534, 65534)
        with pytest.raises(InputFileError, match="owned by uid 65534") as foreign:
            check_state_dir(state_dir)
        assert str(state_dir) in str(foreign.value)
