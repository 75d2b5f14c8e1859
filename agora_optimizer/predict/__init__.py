"""The resource predictor: runtime per resource type and a safe peak-memory quantile per task."""
