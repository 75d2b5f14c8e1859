"""Runs: what each DAG run did against its plan (run records, the leases it really held)."""
