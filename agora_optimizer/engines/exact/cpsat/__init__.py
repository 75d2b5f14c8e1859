"""The CP-SAT engine (OR-Tools)."""
