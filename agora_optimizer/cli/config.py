"""The ``[agora]`` configuration reference, generated from :data:`agora_optimizer.settings.SETTINGS`.

``agora config reference`` prints it as Markdown (``docs/configuration.md`` is that output,
and a test keeps the two equal) or as an ``airflow.cfg`` section to paste; ``agora config
show`` (and ``agora config`` alone) prints the values in effect and where each came from
(default, ``airflow.cfg``, ``AIRFLOW__AGORA__*``), read without importing Airflow
(:func:`agora_optimizer.settings.in_effect`).
"""

from __future__ import annotations

import textwrap
from enum import StrEnum
from typing import Annotated

import typer

from agora_optimizer.cli.common import say, user_errors
from agora_optimizer.settings import SETTINGS, Setting

# (No square brackets in help texts: the CLI's rich markup would take "[agora]" for a style.)
config_app = typer.Typer(help="The agora section of Airflow's configuration.", add_completion=False)

HEADER = """\
# Configuration reference: the `[agora]` section

Generated from `agora_optimizer/settings.py` by `agora config reference > docs/configuration.md`;
do not edit by hand. agora reads its settings from Airflow's configuration: the `[agora]`
section of `airflow.cfg`, or `AIRFLOW__AGORA__<KEY>` in the environment, which wins, as for
any Airflow option. agora registers the section with Airflow (as a provider), so
`airflow config get-value agora KEY` and `airflow config list` know every key and its
default; `agora config show` prints the values in force.
"""


class Format(StrEnum):
    markdown = "markdown"
    cfg = "cfg"


def env_name(setting: Setting) -> str:
    return f"AIRFLOW__AGORA__{setting.key.upper()}"


def markdown() -> str:
    """Every key: a table row with its environment variable, default and meaning."""
    lines = [HEADER, "| Key | Environment variable | Default | What it does |", "|---|---|---|---|"]
    for setting in SETTINGS:
        default = f"`{setting.default}`" if setting.default else "(empty)"
        description = setting.description.replace("|", "\\|")
        lines.append(f"| `{setting.key}` | `{env_name(setting)}` | {default} | {description} |")
    return "\n".join(lines) + "\n"


def airflow_cfg() -> str:
    """An ``[agora]`` section with every key at its default, each under its description."""
    lines = ["[agora]"]
    for setting in SETTINGS:
        lines.append("")
        lines.extend(textwrap.wrap(setting.description, width=96, initial_indent="# ", subsequent_indent="# "))
        lines.append(f"{setting.key} = {setting.default}".rstrip())
    return "\n".join(lines) + "\n"


@config_app.command()
def reference(
    fmt: Annotated[Format, typer.Option("--format", help="markdown (the docs page) or cfg (airflow.cfg)")] = (
        Format.markdown
    ),
) -> None:
    """Print every key of the agora section with its default and what it does."""
    typer.echo(markdown() if fmt is Format.markdown else airflow_cfg(), nl=False)


@config_app.callback(invoke_without_command=True)
def config(ctx: typer.Context) -> None:
    """The agora section of Airflow's configuration: alone, the values in effect (as config show)."""
    if ctx.invoked_subcommand is None:
        show()


@config_app.command()
def show() -> None:
    """Print the agora settings in effect and where each came from (default, airflow.cfg, AIRFLOW__AGORA__*)."""
    from agora_optimizer import settings

    with user_errors():
        found = {setting.key: settings.in_effect(setting.key) for setting in SETTINGS}
        path = settings.airflow_config_file()
    lines = [f"agora settings in effect (airflow.cfg: {path}{'' if path.is_file() else ', not found'})"]
    width = max(len(setting.key) for setting in SETTINGS)
    for setting in SETTINGS:
        value, source = found[setting.key].value, found[setting.key].source
        if setting.sensitive and value and not found[setting.key].meant:
            from agora_optimizer.database import mask_url  # e.g. a database URL with its password

            value = mask_url(value)
        lines.append(f"{setting.key:<{width}} = {value}   ({source})")
    say("\n".join(lines))  # one print: forty cost 50 ms
