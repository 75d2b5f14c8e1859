"""A machine's usage over time, as a step function of cores and memory in use."""

from __future__ import annotations

from bisect import bisect_right

EPS_S = 1e-9


class MachineTimeline:
    """Usage of one machine; ``times[i]`` starts a segment of constant usage up to ``times[i+1]``.

    The last segment runs to infinity and is always empty once every task has ended.
    """

    def __init__(self, vcpus: int, memory_bytes: int) -> None:
        self.vcpus = vcpus
        self.memory_bytes = memory_bytes
        self.times: list[float] = [0.0]
        self.cores: list[int] = [0]
        self.memory: list[int] = [0]

    def earliest_start(self, ready_s: float, duration_s: float, cores: int, memory_bytes: int) -> float:
        """The earliest start >= ``ready_s`` at which the task fits for its whole duration."""
        if duration_s <= EPS_S:
            return ready_s
        times = self.times
        candidate = ready_s
        i = max(bisect_right(times, candidate) - 1, 0)
        j = i
        while j < len(times) and times[j] < candidate + duration_s - EPS_S:
            if self.cores[j] + cores > self.vcpus or self.memory[j] + memory_bytes > self.memory_bytes:
                if j + 1 == len(times):  # cannot happen: the last segment is empty
                    raise AssertionError("task larger than the machine")
                candidate = times[j + 1]
            j += 1
        return candidate

    def _split(self, time_s: float) -> int:
        """Make ``time_s`` a breakpoint and return its index."""
        i = bisect_right(self.times, time_s) - 1
        if abs(self.times[i] - time_s) <= EPS_S:
            return i
        self.times.insert(i + 1, time_s)
        self.cores.insert(i + 1, self.cores[i])
        self.memory.insert(i + 1, self.memory[i])
        return i + 1

    def add(self, start_s: float, end_s: float, cores: int, memory_bytes: int) -> None:
        if end_s - start_s <= EPS_S:
            return
        first = self._split(start_s)
        last = self._split(end_s)
        for k in range(first, last):
            self.cores[k] += cores
            self.memory[k] += memory_bytes
