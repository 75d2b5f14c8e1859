"""A module of ``agora_optimizer`` over :data:`MAX_LINES` lines says at its top why it is one module.

The rule, checkable: within the file's first :data:`FIRST_LINES` lines its docstring holds
"Why one module of some N lines:" followed by the reason (the docstring's first line is what the
module holds; the reason is its next paragraph). A reader then knows before scrolling why it was
not split, and a module that grows past the limit without one fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "agora_optimizer"
MAX_LINES = 500
FIRST_LINES = 5
WHY = re.compile(r"Why one module of some \d+ lines: \w")


def long_modules_without_a_reason(package_dir: Path) -> list[str]:
    """``path (N lines)`` of each module over :data:`MAX_LINES` lines whose first lines give no reason."""
    found = []
    for path in sorted(package_dir.rglob("*.py")):
        lines = path.read_text().splitlines()
        if len(lines) > MAX_LINES and not WHY.search(" ".join(lines[:FIRST_LINES])):
            found.append(f"{path.relative_to(package_dir.parent)} ({len(lines)} lines)")
    return found


def test_every_module_over_500_lines_says_why_in_its_first_lines() -> None:
    assert long_modules_without_a_reason(PACKAGE) == []
    # The rule bites: some modules of the package are that long.
    assert any(len(path.read_text().splitlines()) > MAX_LINES for path in PACKAGE.rglob("*.py"))


def test_a_long_module_without_a_reason_at_its_top_is_named(tmp_path: Path) -> None:
    package = tmp_path / "fakepkg"
    package.mkdir()
    body = "\n" + "VALUE = 1\n" * MAX_LINES
    why = "Why one module of some 500 lines: one algorithm, read top to bottom."
    (package / "short.py").write_text('"""Holds little."""\n')
    (package / "told.py").write_text(f'"""Holds one algorithm.\n\n{why}\n"""\n{body}')
    (package / "late.py").write_text(f'"""Holds one algorithm.\n\nMore.\n\nMore.\n\n{why}\n"""\n{body}')
    (package / "silent.py").write_text(f'"""Holds one algorithm."""\n{body}')
    (package / "empty.py").write_text(f'"""Holds one algorithm.\n\nWhy one module of some 500 lines:\n"""\n{body}')
    assert long_modules_without_a_reason(package) == [
        "fakepkg/empty.py (505 lines)",
        "fakepkg/late.py (509 lines)",
        "fakepkg/silent.py (502 lines)",
    ]
