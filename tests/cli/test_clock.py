"""The start a command's --time-limit-s counts from (agora_optimizer/cli/clock.py)."""

from __future__ import annotations

import subprocess
import sys
import time

from agora_optimizer.cli import clock


def test_an_in_process_command_counts_from_its_call_and_the_console_script_from_its_process() -> None:
    clock.mark_start()
    assert 0 <= time.perf_counter() - clock.command_started() < 0.5
    later = time.perf_counter()
    clock.mark_start()  # the next command in the same process counts from its own call
    assert clock.command_started() >= later
    clock.mark_end()  # a command run without a mark (the app invoked directly) counts from its own call
    time.sleep(0.05)
    now = time.perf_counter()
    assert now - 0.01 <= clock.command_started() <= time.perf_counter()
    # A process that did a second of work before its command: the console script's limit counts that second.
    script = (
        "import time; time.sleep(1.0)\n"
        "from agora_optimizer.cli import clock\n"
        "clock.mark_start(from_process_start=True)\n"
        "print(time.perf_counter() - clock.command_started())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert 1.0 <= float(done.stdout) < 5.0
    assert clock.process_age_s() is not None and clock.process_age_s() > 0  # this test's process has run a while
