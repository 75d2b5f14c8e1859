"""The MILP engine (PuLP; HiGHS or CBC)."""
