"""bench/memory_in_run_margin.py: the share of tasks over what learning memory during a run would reserve."""

from __future__ import annotations

import pytest

from bench.memory_in_run_margin import over_share


def test_equal_peaks_are_never_over_and_reserve_the_margin() -> None:
    tasks, over, median = over_share([[100] * 12], after=10, margin=1.2, seeds=3)
    assert (tasks, over, median) == (6, 0.0, pytest.approx(1.2))  # tasks 11 and 12 of each of three orders


def test_a_peak_above_the_upper_quantile_times_the_margin_is_over() -> None:
    # ten peaks of 100 and one of 1,000: counted only as the eleventh task, and then always over 100 x 1.5
    tasks, over, _ = over_share([[100] * 10 + [1000]], after=10, margin=1.5, seeds=20)
    assert tasks == 20 and 0 < over < 1  # some orders put the big one last, some do not
    _, with_all, _ = over_share([[100] * 10 + [1000]], after=1, margin=1.5, seeds=20)
    assert with_all > 0
