"""Imported by the local pools' fork server, and only there: importing it warms the server up.

``multiprocessing`` lets a fork server only import modules before it forks (its
``preload``), so this module's import is the warm-up: it loads what every task needs and
freezes the garbage collector (:func:`agora_optimizer.executor.backends.local.processes.warm_up`).

First it takes the working directory off ``sys.path``: the server runs as ``python -c``,
which put it first, and Python 3.11's fork server ignores the scheduler's ``sys.path``.
Left in, the preload could import from whatever directory the scheduler started in, and
``importlib.metadata`` would remember distributions by paths relative to it, which break
once a worker changes to its job directory (Airflow then logs "Failed to import plugin
agora" in every task).
"""

from __future__ import annotations

import sys

sys.path[:] = [entry for entry in sys.path if entry not in ("", ".")]

from agora_optimizer.executor.backends.local.processes import warm_up  # noqa: E402 - after the path is fixed

warm_up()
