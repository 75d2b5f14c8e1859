"""The demo and test harness: a local Airflow deployment (local_airflow) and the loopback SLURM cluster's
start and stop (loopback_slurm), for tests, benchmarks and the demo (not part of the installed package)."""
