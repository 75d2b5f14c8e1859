"""A machine's usage over time, as a step function of cores, memory and GPUs in use."""

from __future__ import annotations

from bisect import bisect_left, bisect_right

EPS_S = 1e-9
LATE_TOLERANCE_S = 1e-6  # MachineTimeline.latest_start: rounding, not time


class MachineTimeline:
    """Usage of one machine; ``times[i]`` starts a segment of constant usage up to ``times[i+1]``.

    The last segment runs to infinity and is always empty once every task has ended. GPUs are a
    third capacity (``gpus``, 0 on a machine without): a task that needs none never waits for them.
    """

    def __init__(self, vcpus: int, memory_bytes: int, insertion_window: int | None = None, gpus: int = 0) -> None:
        """``insertion_window``: search gaps only among the last this-many segments (None: all)."""
        self.vcpus = vcpus
        self.memory_bytes = memory_bytes
        self.gpu_count = gpus
        self.insertion_window = insertion_window
        self.times: list[float] = [0.0]
        self.cores: list[int] = [0]
        self.memory: list[int] = [0]
        self.gpus: list[int] = [0]

    def earliest_start(self, ready_s: float, duration_s: float, cores: int, memory_bytes: int, gpus: int = 0) -> float:
        """The earliest start >= ``ready_s`` at which the task fits for its whole duration."""
        times = self.times
        if duration_s <= EPS_S or ready_s >= times[-1]:
            return ready_s  # occupies nothing, or the machine is idle from then on
        used_cores, used_memory, used_gpus = self.cores, self.memory, self.gpus
        free_cores, free_memory = self.vcpus - cores, self.memory_bytes - memory_bytes
        free_gpus = self.gpu_count - gpus
        last = len(times) - 1
        candidate = ready_s
        j = max(bisect_right(times, candidate) - 1, 0)
        window = self.insertion_window
        if window is not None and last - j > window:  # bounded insertion keeps long timelines fast
            j = last - window
            candidate = max(candidate, times[j])
        while j <= last and times[j] < candidate + duration_s - EPS_S:
            if used_cores[j] > free_cores or used_memory[j] > free_memory or (gpus and used_gpus[j] > free_gpus):
                if j == last:  # cannot happen: the last segment is empty
                    raise AssertionError("task larger than the machine")
                candidate = times[j + 1]
            j += 1
        return candidate

    def latest_start(
        self, earliest_s: float, latest_end_s: float, duration_s: float, cores: int, memory_bytes: int, gpus: int = 0
    ) -> float | None:
        """The latest start in ``[earliest_s, latest_end_s - duration_s]`` at which the task fits for its whole
        duration (None: nowhere; a start up to :data:`LATE_TOLERANCE_S` before ``earliest_s`` counts as it):
        from the latest, each segment without room moves the end before the segment begins."""
        times, used_cores, used_memory, used_gpus = self.times, self.cores, self.memory, self.gpus
        free_cores, free_memory = self.vcpus - cores, self.memory_bytes - memory_bytes
        free_gpus = self.gpu_count - gpus
        start = latest_end_s - duration_s
        while start >= earliest_s - LATE_TOLERANCE_S:
            if duration_s <= EPS_S:
                return start
            j = bisect_right(times, start + duration_s - EPS_S) - 1  # the last segment that begins before the end
            blocked = None
            while j >= 0 and (j + 1 == len(times) or times[j + 1] > start + EPS_S):  # segment j overlaps the run
                if used_cores[j] > free_cores or used_memory[j] > free_memory or (gpus and used_gpus[j] > free_gpus):
                    blocked = j
                    break
                j -= 1
            if blocked is None:
                return max(start, earliest_s)
            start = times[blocked] - duration_s
        return None

    def _split(self, time_s: float) -> int:
        """Make ``time_s`` a breakpoint and return its index."""
        i = bisect_right(self.times, time_s) - 1
        if abs(self.times[i] - time_s) <= EPS_S:
            return i
        self.times.insert(i + 1, time_s)
        self.cores.insert(i + 1, self.cores[i])
        self.memory.insert(i + 1, self.memory[i])
        self.gpus.insert(i + 1, self.gpus[i])
        return i + 1

    def add(self, start_s: float, end_s: float, cores: int, memory_bytes: int, gpus: int = 0) -> None:
        if end_s - start_s <= EPS_S:
            return
        first = self._split(start_s)
        last = self._split(end_s)
        for k in range(first, last):
            self.cores[k] += cores
            self.memory[k] += memory_bytes
            if gpus:
                self.gpus[k] += gpus


class SkippingTimeline(MachineTimeline):
    """A :class:`MachineTimeline` whose ``earliest_start`` jumps over saturated stretches.

    A segment is saturated when no task of the workflow could share it: all cores are
    taken, or less than the smallest task's memory is left. ``open_times`` lists, in
    order, the start of every segment that is not saturated (the last, empty one always
    is). Where the plain timeline would step through a run of full segments one by one,
    this one bisects to the next open segment, with the same result: on a long, packed
    machine the search costs O(log n) instead of O(n). A segment whose GPUs are all taken is
    not saturated (a task without GPUs may share it): a GPU task steps through it as the plain
    timeline does, and jumps over the saturated runs.
    """

    def __init__(
        self,
        vcpus: int,
        memory_bytes: int,
        min_task_memory_bytes: int = 0,
        insertion_window: int | None = None,
        gpus: int = 0,
    ) -> None:
        super().__init__(vcpus, memory_bytes, insertion_window, gpus)
        self.min_task_memory_bytes = min_task_memory_bytes
        self.open_times: list[float] = [0.0]

    def _is_open(self, index: int) -> bool:
        return self.cores[index] < self.vcpus and self.memory[index] + self.min_task_memory_bytes <= self.memory_bytes

    def earliest_start(self, ready_s: float, duration_s: float, cores: int, memory_bytes: int, gpus: int = 0) -> float:
        times, open_times = self.times, self.open_times
        if duration_s <= EPS_S or ready_s >= times[-1]:
            return ready_s  # as in the base class
        # The lists and capacities in locals: a 30,000-task list schedule asks this two million times.
        used_cores, used_memory, used_gpus = self.cores, self.memory, self.gpus
        vcpus, machine_memory, gpu_count = self.vcpus, self.memory_bytes, self.gpu_count
        last = len(times) - 1
        candidate = ready_s
        j = max(bisect_right(times, candidate) - 1, 0)
        window = self.insertion_window
        if window is not None and last - j > window:  # bounded insertion, as in the base class
            j = last - window
            candidate = max(candidate, times[j])
        while j <= last and times[j] < candidate + duration_s - EPS_S:
            if used_cores[j] + cores > vcpus or used_memory[j] + memory_bytes > machine_memory:
                candidate = open_times[bisect_right(open_times, times[j])]
                j = bisect_left(times, candidate)
                continue
            if gpus and used_gpus[j] + gpus > gpu_count:
                if j == last:  # cannot happen: the last segment is empty
                    raise AssertionError("task has more GPUs than the machine")
                candidate = times[j + 1]  # open for tasks without GPUs: the next segment may have them free
            j += 1
        return candidate

    def add(self, start_s: float, end_s: float, cores: int, memory_bytes: int, gpus: int = 0) -> None:
        super().add(start_s, end_s, cores, memory_bytes, gpus)
        if end_s - start_s <= EPS_S:
            return
        times, open_times = self.times, self.open_times
        for j in range(bisect_left(times, start_s - EPS_S), bisect_right(times, end_s + EPS_S)):
            k = bisect_left(open_times, times[j])
            listed = k < len(open_times) and open_times[k] == times[j]
            if self._is_open(j) and not listed:
                open_times.insert(k, times[j])
            elif listed and not self._is_open(j):
                del open_times[k]
