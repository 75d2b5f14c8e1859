"""When a task's inputs are all present on a machine: parents elsewhere pay their transfer."""

from __future__ import annotations

from collections.abc import Hashable, Sequence


class Arrivals:
    """When all of a task's inputs are present on a given machine.

    ``inputs`` holds, per parent, its machine (any object compared by identity), its end
    and the transfer time of the edge's bytes; a parent on the same machine sends nothing.
    """

    def __init__(self, inputs: Sequence[tuple[Hashable, float, float]]) -> None:
        self._remote = sorted(((end + transfer, slot) for slot, end, transfer in inputs), key=lambda x: -x[0])
        self._local: dict[Hashable, float] = {}
        for slot, end, _ in inputs:
            self._local[slot] = max(self._local.get(slot, 0.0), end)

    def on(self, slot: Hashable) -> float:
        ready = self._local.get(slot, 0.0)
        for arrival, source in self._remote:
            if source is not slot:
                return max(ready, arrival)
        return ready
