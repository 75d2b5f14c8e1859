"""The scores of a predictor on runs it did not see."""

from __future__ import annotations

from agora_optimizer.predict.evaluation import coverage


def test_coverage_is_the_share_of_runtimes_at_most_their_quantile() -> None:
    assert coverage([10.0, 10.0, 10.0, 10.0], [5.0, 10.0, 11.0, 30.0]) == {"tasks": 4, "share": 0.5}
    assert coverage([1.0, 1.0], [0.0, 2.0]) == {"tasks": 1, "share": 0.0}  # a 0 s task says nothing
    assert coverage([], []) == {"tasks": 0, "share": None}
