# The few commands a developer types every day.
.PHONY: demo test test-fast lint fmt types bench
# The tests that need nothing but Python: no Airflow, SLURM, PostgreSQL, Redis, moto, browser or Compose
# (markers: pyproject.toml and tests/conftest.py, which sets most from the fixtures a test uses).
FAST := not airflow and not slurm and not postgres and not celery and not moto and not browser and not docker and not slow
demo:   ; bash scripts/demo.sh
test:   ; bash scripts/test.sh
test-fast: ; bash -c 'source scripts/bootstrap.sh && python -m pytest -q -n 2 --dist load -m "$(FAST)"'
lint:   ; .venv/bin/ruff check . && .venv/bin/ruff format --check .
fmt:    ; .venv/bin/ruff format . && .venv/bin/ruff check --fix .
types:  ; .venv/bin/mypy
bench:  ; .venv/bin/python bench/run_engines.py --sizes none --time-limit-s 5
