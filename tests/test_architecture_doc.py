"""docs/architecture.md's table of the package is the package: every top-level module and folder, in the
order of the layers (``tests/test_layers.py``), each with what it imports, read from the source."""

from __future__ import annotations

import re

from tests.conftest import REPO
from tests.test_import_cycles import import_graph, module_names
from tests.test_layers import LAYERS, PACKAGE, top_level

PAGE = REPO / "docs" / "architecture.md"
LEFT_OUT = {"__init__", "__main__"}  # the version, and ``python -m agora_optimizer``: no row of their own


def table_rows(text: str) -> dict[str, set[str]]:
    """The package table's rows, in the page's order: top-level name -> the names its imports cell gives."""
    rows: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"`[\w]+(/|\.py)`", cells[0]):
            continue
        name = cells[0].strip("`").removesuffix("/").removesuffix(".py")
        rows[name] = set(re.findall(r"`(\w+)(?:/|\.py)?`", cells[2]))
    return rows


def imports_by_top_level() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {top_level(m): set() for m in module_names(PACKAGE)}
    for module, targets in import_graph(PACKAGE).items():
        found[top_level(module)] |= {top_level(t) for t in targets} - {top_level(module)} - LEFT_OUT
    return found


def test_the_architecture_table_lists_every_part_of_the_package_in_the_order_of_the_layers() -> None:
    rows = list(table_rows(PAGE.read_text()))
    layered = [name for layer in LAYERS for name in layer if name not in LEFT_OUT]
    assert rows == layered, {"the table": rows, "the layers": layered}


def test_the_architecture_tables_imports_are_what_the_source_imports() -> None:
    rows, source = table_rows(PAGE.read_text()), imports_by_top_level()
    wrong = {n: {"page": sorted(rows[n]), "source": sorted(source[n])} for n in rows if rows[n] != source[n]}
    assert not wrong, wrong


def test_a_table_row_is_read_with_its_imports() -> None:
    page = "| folder | holds | imports |\n|---|---|---|\n| `io/` | files, `documents.py` | `errors`, `model` |\n"
    assert table_rows(page) == {"io": {"errors", "model"}}
