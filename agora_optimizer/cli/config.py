"""The ``[agora]`` configuration reference, generated from :data:`agora_optimizer.settings.SETTINGS`.

``agora config reference`` prints it as Markdown (``docs/configuration.md`` is that output,
and a test keeps the two equal) or as an ``airflow.cfg`` section to paste; ``agora config
show`` prints the values in force, from ``airflow.cfg`` and ``AIRFLOW__AGORA__*``.
"""

from __future__ import annotations

import textwrap
from enum import StrEnum
from typing import Annotated

import typer

from agora_optimizer.settings import SETTINGS, Setting

# (No square brackets in help texts: the CLI's rich markup would take "[agora]" for a style.)
config_app = typer.Typer(help="The agora section of Airflow's configuration.", no_args_is_help=True)

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


@config_app.command()
def show() -> None:
    """Print the agora settings in force (airflow.cfg, overridden by AIRFLOW__AGORA__*)."""
    from agora_optimizer import settings

    width = max(len(setting.key) for setting in SETTINGS)
    for setting in SETTINGS:
        value = settings.get(setting.key)
        mark = "" if value == setting.default else "   (default: " + (setting.default or "empty") + ")"
        shown = "***" if setting.sensitive and value else value  # e.g. a database URL with its password
        typer.echo(f"{setting.key:<{width}} = {shown}{mark}")
