"""Planning: the problem an engine is asked, its bounds, leases and checks, the schedule building
blocks the engines share, and the driver that runs the engines (``optimize``, ``pareto``)."""
