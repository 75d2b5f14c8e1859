"""The ``agora`` command line: the top-level app, made of one module per command group.

- :mod:`~agora_optimizer.cli.optimize`: ``optimize``, ``validate``, ``gantt``; :mod:`~agora_optimizer.cli.pareto`:
  ``pareto``; :mod:`~agora_optimizer.cli.plan_input`: the input, logs and summary line they share
- :mod:`~agora_optimizer.cli.predict`: ``train``, ``predict``, ``simulate``
- :mod:`~agora_optimizer.cli.traces`, :mod:`~agora_optimizer.cli.queue_wait` (``queue``),
  :mod:`~agora_optimizer.cli.plans`, :mod:`~agora_optimizer.cli.runs`, :mod:`~agora_optimizer.cli.config`:
  the groups of the same names
- :mod:`~agora_optimizer.cli.aws`: ``aws provision`` (sets up AWS Batch for the catalog's ``aws`` resources)
- :mod:`~agora_optimizer.cli.common`: consoles, one-line user errors, shared options and ranges

Only this module imports the groups; they import :mod:`~agora_optimizer.cli.common` (``runs`` also
the trace store option of ``traces``, ``optimize --apply`` the plan store of ``plans``), never this
module (``tests/test_import_cycles.py``). :func:`main` is the ``agora`` console script
(``agora_optimizer.cli:main``) and ``python -m agora_optimizer``.
"""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable
from typing import Any

import typer

from agora_optimizer.cli import clock, optimize, pareto, predict
from agora_optimizer.cli.aws import aws_app
from agora_optimizer.cli.common import command_group
from agora_optimizer.cli.config import config_app
from agora_optimizer.cli.plans import plans_app
from agora_optimizer.cli.queue_wait import queue_app
from agora_optimizer.cli.runs import runs_app
from agora_optimizer.cli.traces import traces_app

app = command_group("agora: place every task of a workflow on the right resource, fast and cheap, within memory.")
optimize.register(app)
pareto.register(app)
predict.register(app)
app.add_typer(traces_app, name="traces")
app.add_typer(queue_app, name="queue")
app.add_typer(plans_app, name="plans")
app.add_typer(runs_app, name="runs")
app.add_typer(config_app, name="config")
app.add_typer(aws_app, name="aws")


@functools.cache
def _command() -> Callable[..., Any]:
    """The click command tree of ``app``, built once per process (50 ms: every annotation is read)."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``agora`` console script; returns the exit code.

    The console script's process ends right after: its objects are frozen out of the garbage collector
    first, so that the interpreter's last collection does not walk them (0.8 s with Airflow, pandas and
    scikit-learn loaded, counted against ``--time-limit-s`` by whoever waits for the command).
    """
    console_script = argv is None
    clock.mark_start(from_process_start=console_script)  # the console script: its process began before main
    command = _command()
    try:
        command(args=sys.argv[1:] if console_script else argv, prog_name="agora")
    except SystemExit as exc:  # click's standalone mode ends every run this way
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        clock.mark_end()
        if console_script:
            gc.freeze()
    return 0
