"""Planning: the problem an engine is asked, its bounds, leases and checks, and the schedule building
blocks the engines share. Nothing here runs an engine: the drivers that do are in ``optimize``."""
