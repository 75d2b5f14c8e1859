"""Each DAG's current plan and its history (the plans the rerun DAG keeps writing)."""
