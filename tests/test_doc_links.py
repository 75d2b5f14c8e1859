"""Every relative link in README.md and docs/ points to a file that exists (and a heading that exists)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return [m.group(1) for m in LINK.finditer(text)]


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"^#{1,6} (.*)", line)
        if heading:
            title = re.sub(r"[`*_]", "", heading.group(1)).strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_to_an_existing_file_and_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_shows_the_compatibility_summary_and_one_picture() -> None:
    readme = (REPO / "README.md").read_text()
    assert "106 of 113" in readme and "0 differed" in readme and "28" in readme
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert len(pictures) == 1 and (REPO / pictures[0]).stat().st_size < 200_000


def test_the_docs_name_the_spec_by_the_repositorys_copy() -> None:
    """A clone has docs/spec/agora-model.md, not ../shared/: only the page on keeping the copy equal names it."""
    allowed = {REPO / "docs" / "spec-proposals.md", REPO / "CHANGELOG.md"}
    naming = [str(p.relative_to(REPO)) for p in PAGES if p not in allowed and "shared/spec" in p.read_text()]
    assert not naming
