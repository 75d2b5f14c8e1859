# The few commands a developer types every day.
.PHONY: demo test lint fmt types bench
demo:   ; bash scripts/demo.sh
test:   ; bash scripts/test.sh
lint:   ; .venv/bin/ruff check . && .venv/bin/ruff format --check .
fmt:    ; .venv/bin/ruff format . && .venv/bin/ruff check --fix .
types:  ; .venv/bin/mypy
bench:  ; .venv/bin/python bench/run_engines.py --sizes none --time-limit-s 5
