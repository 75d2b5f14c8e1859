"""The process-tree sampler on real processes: memory and CPU of descendants, short-lived children included."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from agora_optimizer.traces.sampler import ProcessTreeSampler, SamplerError, child_pids

MIB = 2**20

# Allocates and touches ~200 MiB, burns 0.6 s of CPU, says so, then idles so the sampler can look.
ALLOCATE_AND_BURN = textwrap.dedent(
    """
    import sys, time
    block = b"x" * (200 * 1024 * 1024)
    started = time.process_time()
    while time.process_time() - started < 0.6:
        pass
    print("done", flush=True)
    sys.stdin.read()
    """
)

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {seconds}: pass\n"


def _shell(script: str) -> subprocess.Popen[str]:
    """``bash -c script``, talking through pipes, with this Python as ``$PY`` (its Python children are
    grandchildren of this test)."""
    return subprocess.Popen(
        ["bash", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PY": sys.executable},
    )


def _follow(script: str, interval_s: float) -> tuple[ProcessTreeSampler, subprocess.Popen[str]]:
    """Start :func:`_shell` of ``script`` (the root) and follow it."""
    shell = _shell(script)
    return ProcessTreeSampler(shell.pid, interval_s=interval_s).start(), shell


def _wait_for(shell: subprocess.Popen[str], word: str) -> None:
    assert shell.stdout is not None
    for line in shell.stdout:
        if line.strip() == word:
            return
    raise AssertionError(f"the workload ended without printing {word!r}")


@pytest.mark.slow  # burns CPU in real processes for seconds
def test_the_sampler_sees_a_descendant_that_allocates_200_mib_and_burns_cpu() -> None:
    sampler, shell = _follow(f'"$PY" -c {_quote(ALLOCATE_AND_BURN)}; true', interval_s=0.05)  # bash stays the root
    try:
        _wait_for(shell, "done")
        sample = sampler.stop()
    finally:
        shell.communicate(input="", timeout=30)
    assert sample.peak_rss_bytes >= 200 * MIB
    assert sample.peak_rss_bytes < 1024 * MIB  # the tree holds one 200 MiB block, not several
    assert sample.cpu_time_s >= 0.55
    assert sample.cpu_time_s <= sample.wall_s * (os.cpu_count() or 1) + 0.1
    assert sample.processes_seen >= 2  # the shell and its python child
    assert sample.samples >= 3


@pytest.mark.slow  # burns CPU in real processes for seconds
def test_children_that_live_between_two_samples_still_count_their_cpu() -> None:
    burn = _quote(BURN.format(seconds=0.3))
    script = f'for i in 1 2 3; do "$PY" -c {burn}; done; echo end; read -r _'
    sampler, shell = _follow(script, interval_s=5.0)  # the loop ends before the second sample
    try:
        _wait_for(shell, "end")
        sample = sampler.stop()
    finally:
        shell.communicate(input="\n", timeout=30)
    assert sample.cpu_time_s >= 0.85  # three children of 0.3 s each, reaped by the shell
    assert sample.samples == 2  # the first at start, the last at stop


def test_cpu_time_counts_only_from_start() -> None:
    burn = _quote(BURN.format(seconds=0.5))
    shell = _shell(f'"$PY" -c {burn}; echo burnt; read -r _; echo end; read -r _')
    try:
        _wait_for(shell, "burnt")  # 0.5 s of CPU already spent before the sampler starts
        sampler = ProcessTreeSampler(shell.pid, interval_s=0.05).start()
        sample = sampler.stop()
    finally:
        shell.communicate(input="\n\n", timeout=30)
    assert sample.cpu_time_s < 0.2


# Holds 200 MiB, frees it, says so, then idles: a peak that is over before a sampler starts.
SPIKE_THEN_IDLE = textwrap.dedent(
    """
    import sys
    block = b"x" * (200 * 1024 * 1024)
    del block
    print("freed", flush=True)
    sys.stdin.read()
    """
)


@pytest.mark.parametrize("root_high_water", [True, False])
def test_the_root_peak_before_start_counts_only_for_a_root_started_for_the_measure(root_high_water: bool) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", SPIKE_THEN_IDLE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        _wait_for(process, "freed")
        sampler = ProcessTreeSampler(process.pid, interval_s=0.05, root_high_water=root_high_water).start()
        sample = sampler.stop()
    finally:
        process.communicate(input="", timeout=30)
    if root_high_water:
        assert sample.peak_rss_bytes >= 200 * MIB  # the task's process: its whole life is the task's
    else:
        assert sample.peak_rss_bytes < 100 * MIB  # only what the tree held while it was followed


def test_child_pids_lists_the_children_and_nothing_once_the_process_is_gone() -> None:
    shell = subprocess.Popen(["bash", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(child_pids(shell.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        children = child_pids(shell.pid)
        assert len(children) == 2
        assert all(psutil.Process(child).ppid() == shell.pid for child in children)
    finally:
        for child in psutil.Process(shell.pid).children():
            child.kill()
        shell.wait(10)
    assert child_pids(shell.pid) == []


def test_a_missing_process_is_a_clear_error() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with pytest.raises(SamplerError, match=str(gone.pid)):
        ProcessTreeSampler(gone.pid).start()


def test_stop_before_start_and_a_bad_interval_are_clear_errors() -> None:
    with pytest.raises(SamplerError, match="not started"):
        ProcessTreeSampler().stop()
    with pytest.raises(SamplerError, match="interval"):
        ProcessTreeSampler(interval_s=0)


def _quote(code: str) -> str:
    return "'" + code.replace("'", "'\\''") + "'"


# Holds ~200 MiB, then forks a child that shares every page of it (as Airflow's supervisor forks the task).
FORK_AND_SHARE = textwrap.dedent(
    """
    import os, sys, time
    block = bytearray(200 * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
    time.sleep(0.5)
    print("forked", flush=True)
    sys.stdin.read()
    """
)


def test_pages_a_forked_child_shares_with_its_parent_count_once() -> None:
    """The tree holds one 200 MiB block, in two processes: summed RSS said 400 MiB (and killed tasks for it)."""
    if not os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"):
        pytest.skip("needs /proc/PID/smaps_rollup (Linux 4.14+) for the proportional set size")
    sampler, shell = _follow(f'"$PY" -c {_quote(FORK_AND_SHARE)}; true', interval_s=0.05)
    try:
        _wait_for(shell, "forked")
        time.sleep(0.3)  # a few samples of both processes
        sample = sampler.stop()
    finally:
        for child in psutil.Process(shell.pid).children(recursive=True):
            child.kill()
        shell.communicate(input="", timeout=30)
    assert 200 * MIB <= sample.peak_rss_bytes < 300 * MIB
