"""What each pytest-xdist worker did, from the timeline tests/conftest.py writes under ``$AGORA_TEST_TIMELINE``.

``python scripts/test_timeline.py out/test-timeline.csv``: per worker, when it ended and how long it was busy
(the suite's wall time is the later end; a worker that ends much sooner than the other had too little to do at
the end), then the longest scheduling units (tests/conftest.py's ``xdist_unit``) with their worker.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import xdist_unit

SHOWN = 12  # longest units listed


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], newline="", encoding="utf-8") as timeline:
        rows = [(w, float(start), float(duration), nodeid) for w, start, duration, _, _, nodeid in csv.reader(timeline)]
    if not rows:
        print(f"{argv[0]}: no test ran")
        return 0
    began = min(start for _, start, _, _ in rows)
    ends: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    units: dict[tuple[str, str], float] = defaultdict(float)
    for worker, start, duration, nodeid in rows:
        ends[worker] = max(ends[worker], start + duration - began)
        busy[worker] += duration
        units[(xdist_unit(nodeid), worker)] += duration
    for worker in sorted(ends):
        print(f"{worker}: ended at {ends[worker] / 60:.1f} min, busy {busy[worker] / 60:.1f} min")
    for (unit, worker), seconds in sorted(units.items(), key=lambda item: -item[1])[:SHOWN]:
        print(f"{seconds:8.1f} s  {worker}  {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
