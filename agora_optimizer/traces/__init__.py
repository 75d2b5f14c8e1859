"""Traces: one record per task attempt, the store that keeps them, and the collectors that fill it."""
