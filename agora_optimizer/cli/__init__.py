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

Help is as wide as the terminal, at most :data:`HELP_MAX_WIDTH` (80 when not a terminal, or
``COLUMNS``), and a flag's row shows no ``<bool>``: a flag takes no value.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import typer
from typer import _click
from typer.core import TyperOption

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


HELP_MAX_WIDTH = 100  # columns: wider help lines are hard to read


@functools.cache
def _command() -> Callable[..., Any]:
    """The click command tree of ``app``, built once per process (50 ms: every annotation is read)."""
    command = typer.main.get_command(app)
    _flags_without_type(command)
    return command


def _flags_without_type(command: _click.Command) -> None:
    """Show no type on the help row of a flag (``--json``, ``--help``): typer shows ``<bool>``, though a
    flag takes no value. Its help row shows the metavar instead of the type when there is one."""
    help_option = command.get_help_option(_click.Context(command))  # made once per command, then kept
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _flags_without_type(sub)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``agora`` console script; returns the exit code.

    The console script's process ends right after: its objects are frozen out of the garbage collector
    first, so that the interpreter's last collection does not walk them (0.8 s with Airflow, pandas and
    scikit-learn loaded, counted against ``--time-limit-s`` by whoever waits for the command).
    """
    console_script = argv is None
    clock.mark_start(from_process_start=console_script)  # the console script: its process began before main
    command = _command()
    with _help_width():
        try:
            command(args=sys.argv[1:] if console_script else argv, prog_name="agora")
        except SystemExit as exc:  # click's standalone mode ends every run this way
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            clock.mark_end()
            if console_script:
                gc.freeze()
    return 0


@contextlib.contextmanager
def _help_width() -> Iterator[None]:
    """Typer's help and error panels as wide as the terminal, at most HELP_MAX_WIDTH, unless TERMINAL_WIDTH
    (typer's own setting) says otherwise. Typer reads TERMINAL_WIDTH when its help module is imported,
    which only help and errors do (50 ms, 0.2 s on a busy machine: not for every command)."""
    if os.environ.get("TERMINAL_WIDTH"):
        yield
        return
    width = min(shutil.get_terminal_size().columns, HELP_MAX_WIDTH)
    if "typer.rich_utils" in sys.modules:  # imported already (an earlier main() of this process): set it there
        from typer import rich_utils

        rich_utils.MAX_WIDTH = width
        yield
        return
    os.environ["TERMINAL_WIDTH"] = str(width)
    try:
        yield
    finally:
        os.environ.pop("TERMINAL_WIDTH", None)
