#!/usr/bin/env bash
# The test command: installs what the tests need, then lint, format check, type check, tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/bootstrap.sh
echo "== ruff check"; ruff check .
echo "== ruff format --check"; ruff format --check .
echo "== mypy"; mypy
# Two workers: the tests that start Airflow, SLURM or PostgreSQL run in one of them, in order (see
# tests/conftest.py); the rest share both. -n 0 runs everything in this process.
echo "== pytest"
# Each test's worker and times go to out/test-timeline.csv; scripts/test_timeline.py reads it after the run
mkdir -p out && rm -f out/test-timeline.csv
status=0
AGORA_TEST_TIMELINE="$ROOT/out/test-timeline.csv" python -m pytest -n 2 --dist loadscope --durations=15 "$@" || status=$?
echo "== pytest's workers"; python scripts/test_timeline.py out/test-timeline.csv || true
exit "$status"
