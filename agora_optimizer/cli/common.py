"""What every ``agora`` command group shares: the consoles, one-line user errors, common options and number ranges,
and the one way names and figures are shown (tables of text, ratios).

Every error that is the input's fault is one line on stderr, exit code 2 (the ``AgoraError``'s own
code), and no file written. Names (tasks, runs, machines, resources, messages) are shown as they are:
every table is a :func:`data_table` of text and every line goes through :func:`say`, never rich markup
(a machine ``gpu[a100]#0`` stays ``gpu[a100]#0``; a name holding ``[/x]`` breaks nothing). Every ratio
goes through :func:`ratio_text`: ``n/a`` against a bound or baseline of 0, never a division by it.

The command groups import this module (and a few, one shared piece of another group: ``runs`` the
trace store option, ``optimize --apply`` the plan store); none imports the ``agora`` app
(``agora_optimizer.cli``), which imports them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agora_optimizer.errors import AgoraError, FieldError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.limits import MAX_MACHINE_MEMORY_GIB, MAX_PLANNING_S, MAX_RUNTIME_S, MAX_TIME_S, MAX_USD
from agora_optimizer.runs.record import ratio

if TYPE_CHECKING:
    from agora_optimizer.model.catalog import Catalog
    from agora_optimizer.model.plan import Plan

out_console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def command_group(help_text: str) -> typer.Typer:
    """A Typer app for one ``agora`` command group: its help, and the help when called without a command."""
    return typer.Typer(help=help_text, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn an ``AgoraError`` into one line on stderr and its exit code (2)."""
    try:
        yield
    except AgoraError as exc:
        say(f"agora: error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def say(text: str, *, err: bool = False) -> None:
    """Print ``text`` as it is (no markup, no highlighting): on stdout, or on stderr with ``err``."""
    (err_console if err else out_console).print(text, markup=False, highlight=False)


DagOpt = Annotated[str | None, typer.Option("--dag", help="Only this DAG.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
CatalogOpt = Annotated[Path, typer.Option("--catalog", "-c", help="Catalog of resource types (YAML or JSON).")]
PlanCatalogOpt = Annotated[
    Path | None,
    typer.Option(
        "--catalog", "-c", help="Catalog of resource types [default: the plan's own, from here or beside the plan]."
    ),
]


@dataclass(frozen=True)
class Range:
    """The values a number option takes: finite, from ``minimum`` (excluded when ``open``) to ``maximum``."""

    minimum: float
    maximum: float
    open: bool = False

    def __str__(self) -> str:
        return f"{'(' if self.open else '['}{self.minimum:g}, {self.maximum:g}]"


# The range of every number option (from agora_optimizer.model.limits), checked by check_option.
OPTION_RANGES: dict[str, Range] = {
    "--alpha": Range(0.0, 1.0),
    "--deadline-s": Range(0.0, MAX_TIME_S, open=True),
    "--deadline-margin": Range(0.0, 0.5),
    "--budget-usd": Range(0.0, MAX_USD),
    "--time-limit-s": Range(0.01, MAX_PLANNING_S),
    "--default-memory-gib": Range(0.001, MAX_MACHINE_MEMORY_GIB),
    "--queue-time-limit-s": Range(1.0, MAX_RUNTIME_S),
}


def ranged(option: str, text: str) -> str:
    """An option's help text with its range."""
    return f"{text} {OPTION_RANGES[option]}"


def check_option(option: str, value: float | None, bounds: Range | None = None) -> None:
    """Refuse ``inf``, ``nan`` and values out of the option's range: an ``AgoraError`` naming it (exit code 2).

    Checked here rather than by typer's ``min``/``max`` (which lets ``nan`` through) so that every
    number option fails the same way, in one line, before anything is read or written. ``bounds``
    for an option whose name means something else in another command (``agora queue``'s
    ``--time-limit-s`` is a SLURM job's, not the planner's).
    """
    if value is None:
        return
    bounds = bounds or OPTION_RANGES[option]
    above = value > bounds.minimum if bounds.open else value >= bounds.minimum
    if not (math.isfinite(value) and above and value <= bounds.maximum):
        raise AgoraError(f"option {option}: expected a number in {bounds}, got {value:g}")


def number(value: float | None, style: str) -> str:
    """``value`` in ``style`` (a ``str.format`` pattern), or ``-`` when there is none."""
    return "-" if value is None else style.format(value)


def ratio_text(value: float | None, base: float | None, style: str = "{:.3f}", *, change: bool = False) -> str:
    """``value / base`` in ``style`` (with ``change``, ``value / base - 1``): ``-`` where either is missing,
    ``n/a`` where ``base`` is 0, as a free catalog's cost bound or a plan that cost nothing is. Every ratio
    the commands print against a bound, a baseline or a plan goes through here, never a bare division."""
    if value is None or base is None:
        return "-"
    quotient = ratio(value, base)
    return "n/a" if quotient is None else style.format(quotient - 1 if change else quotient)


def json_ready(value: Any) -> Any:
    """``value`` (dicts, lists and numbers) with every number that is not finite as None: null in JSON and n/a
    when shown, so that a document written with ``allow_nan=False`` never holds ``Infinity`` or ``NaN``."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(item) for item in value]
    return value


FOLD_MIN_WIDTH = 12  # a folded column (a long name) keeps at least this many characters a line


def data_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Collection[str] = (),
    *,
    drop: Sequence[str] = (),
    fold: Collection[str] = (),
    width: int | None = None,
) -> Table:
    """A rich table of data: its title, headers and cells are text as given, never markup; the columns
    named in ``right`` are right-aligned (numbers), the others left-aligned.

    The table fits ``width`` (the console's: the terminal's, 80 when not a terminal). A column is as
    narrow as its longest cell and the longest word of its header (headers wrap between words, cells
    never; the first column, the rows' labels, not even its header), and a column named in ``fold``
    as narrow as :data:`FOLD_MIN_WIDTH` (its long cells folded over lines). When even that is too
    wide, the columns named in ``drop`` are left out, first named first, until it fits, and a caption
    says which.
    """
    cells = [[str(cell) for cell in row] for row in rows]
    width = width or out_console.width
    shown = list(range(len(columns)))
    sizes = [[cell_len(row[i]) for row in cells if i < len(row)] for i in range(len(columns))]

    def natural(i: int) -> int:
        return max([cell_len(columns[i]), *sizes[i]])

    def narrowest(i: int) -> int:
        if i == 0 and columns[0] not in fold:
            return natural(0)
        header = max((cell_len(word) for word in columns[i].split()), default=0)
        return max(header, min(FOLD_MIN_WIDTH, natural(i)) if columns[i] in fold else max(sizes[i], default=0))

    def table_width(size: Callable[[int], int]) -> int:
        return sum(size(i) for i in shown) + 3 * len(shown) + 1  # borders and a space each side of a cell

    left_out = []
    for name in drop:
        if table_width(narrowest) <= width:
            break
        shown.remove(columns.index(name))
        left_out.append(name)
    widths: dict[int, int | None] = dict.fromkeys(shown)
    if table_width(natural) > width:  # rich would cut words to fit: give each column its width
        spare = width - table_width(narrowest)
        # The folded names first, then the columns that need least to be whole: most headers on one line.
        for i in sorted(shown, key=lambda i: (columns[i] not in fold, natural(i) - narrowest(i))):
            extra = max(0, min(spare, natural(i) - narrowest(i)))
            widths[i], spare = narrowest(i) + extra, spare - extra
    caption = f"left out to fit {width} columns: {', '.join(left_out)}" if left_out else None
    table = Table(title=Text(title, style="table.title"), caption=caption and Text(caption, style="table.caption"))
    for i in shown:
        table.add_column(
            Text(columns[i]),
            justify="right" if columns[i] in right else "left",
            no_wrap=i == 0 and columns[0] not in fold,
            overflow="fold",
            width=widths[i],
        )
    for row in cells:
        table.add_row(*(Text(row[i]) for i in shown if i < len(row)))
    return table


def plan_catalog(plan_path: Path, plan: Plan, catalog: Path | None) -> Catalog:
    """``catalog`` if given, else the file the plan names in its ``catalog`` field (from the working
    directory, or else from the plan's directory)."""
    if catalog is not None:
        return load_catalog(catalog)
    named = Path(plan.catalog)
    for candidate in (named, plan_path.parent / named):
        if candidate.is_file():
            return load_catalog(candidate)
    raise FieldError(
        str(plan_path), "catalog", f"{plan.catalog!r} is not a file here or beside the plan: pass --catalog"
    )
