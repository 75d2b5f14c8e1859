"""A machine's usage over time, as a step function of cores and memory in use."""

from __future__ import annotations

from bisect import bisect_right

EPS_S = 1e-9
INSERTION_WINDOW = 48  # gaps older than the last this-many segments are not searched


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
        times = self.times
        if duration_s <= EPS_S or ready_s >= times[-1]:
            return ready_s  # occupies nothing, or the machine is idle from then on
        used_cores, used_memory = self.cores, self.memory
        free_cores, free_memory = self.vcpus - cores, self.memory_bytes - memory_bytes
        last = len(times) - 1
        candidate = ready_s
        j = max(bisect_right(times, candidate) - 1, 0)
        if last - j > INSERTION_WINDOW:  # bounded insertion keeps long timelines fast
            j = last - INSERTION_WINDOW
            candidate = max(candidate, times[j])
        while j <= last and times[j] < candidate + duration_s - EPS_S:
            if used_cores[j] > free_cores or used_memory[j] > free_memory:
                if j == last:  # cannot happen: the last segment is empty
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
