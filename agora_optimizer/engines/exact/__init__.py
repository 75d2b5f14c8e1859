"""Exact engines: a MILP (PuLP, with HiGHS or CBC) and a CP-SAT model of the whole problem, the
data they share, and the repair that re-times their schedules with the real durations."""
