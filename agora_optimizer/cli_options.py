"""Options that several ``agora`` commands share (the main CLI and its sub-apps)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CatalogOpt = Annotated[Path, typer.Option("--catalog", "-c", help="Catalog of resource types (YAML or JSON).")]
PlanCatalogOpt = Annotated[
    Path | None,
    typer.Option(
        "--catalog", "-c", help="Catalog of resource types [default: the plan's own, from here or beside the plan]."
    ),
]
