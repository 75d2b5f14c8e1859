"""Layers that only point down: a module of ``agora_optimizer`` imports from its own layer or lower ones.

:data:`LAYERS` is the one order, lowest first; each layer holds the top-level names of the package
(a subpackage or a module; ``__init__`` is the package's own ``__init__.py``) that stand at that
height. Imports are read as ``tests/test_import_cycles.py`` reads them: module-level and
function-local ones, ``TYPE_CHECKING`` left out. Every layer is checked (:data:`CHECKED_UP_TO` is
the top), with no exception list: an import that points up is fixed by moving code to where it
belongs (placement is the model's, the catalog loader the settings', the Airflow pools the
executor's), not by moving a layer.

Where the top-level modules stand:

- ``__init__`` (the version) and ``errors`` (the one error hierarchy) at the bottom: they import
  nothing of agora's, and every layer may raise an agora error.
- ``gantt`` with ``io``: it writes a plan as a chart file, as ``io`` writes plans and workflows; it
  reads the model only, and ``optimize.pareto`` draws its front with it.
- ``settings`` (the ``[agora]`` keys, read through Airflow's configuration, and the one loader of
  ``[agora] catalog``), ``slurm`` (the one SLURM client) and ``database`` (the one opener of a SQL
  database) above ``optimize``: the optimizer reads no setting, runs no command and opens no
  database; the stores, the queue waits and the executor above it do.
- ``provider_info`` (Airflow's provider entry) with ``integration``.
- ``plugin`` (Airflow's plugin: the trace and run listeners and the agora view) with ``cli`` and
  ``__main__``: the entry points, above everything they register.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import REPO
from tests.test_import_cycles import fake_package, import_graph, module_names

PACKAGE = REPO / "agora_optimizer"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("__init__", "errors"),
    ("model",),
    ("io", "gantt"),
    ("planning",),  # the problem, bounds, leases, the checker, the building blocks every engine uses
    ("engines",),  # one module per algorithm
    ("optimize",),  # the drivers above the engines: optimize, pareto, window, the portfolio
    ("settings", "slurm", "database"),
    ("traces", "queue_wait"),
    ("predict",),
    ("plans",),
    ("runs",),
    ("executor",),
    ("integration", "provider_info"),
    ("ui",),
    ("cli", "__main__", "plugin"),  # the entry points
)
CHECKED_UP_TO = "cli"


def layer_heights(layers: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    """Each top-level name's layer, 0 the lowest; a name placed twice is an error in the list."""
    heights: dict[str, int] = {}
    for height, names in enumerate(layers):
        for name in names:
            assert name not in heights, f"'{name}' stands in two layers"
            heights[name] = height
    return heights


def top_level(module: str) -> str:
    """``pkg.engines.exact.shared`` -> ``engines``; the package itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(package_dir: Path, layers: tuple[tuple[str, ...], ...], checked_up_to: str) -> list[str]:
    """One line per import, by a module of a checked layer, of a module of a higher layer (or of none)."""
    heights = layer_heights(layers)
    highest_checked = heights[checked_up_to]
    found = []
    for module, imported in sorted(import_graph(package_dir).items()):
        height = heights.get(top_level(module))
        if height is None or height > highest_checked:
            continue
        for target in sorted(imported):
            target_height = heights.get(top_level(target))
            if target_height is None or target_height > height:
                where = "no layer" if target_height is None else f"layer {target_height}"
                found.append(
                    f"{module} (layer {height}, {top_level(module)}) imports {target} ({where}, {top_level(target)})"
                )
    return found


def unplaced(package_dir: Path, layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """The top-level names of the package that stand in no layer."""
    heights = layer_heights(layers)
    return sorted({top_level(m) for m in module_names(package_dir)} - set(heights))


def test_every_module_imports_only_from_its_own_or_lower_layers() -> None:
    assert LAYERS[-1][0] == CHECKED_UP_TO  # the whole package
    found = upward_imports(PACKAGE, LAYERS, CHECKED_UP_TO)
    assert not found, "imports that point up:\n" + "\n".join(found)
    # The graph is the real one: engines import planning, the portfolio imports the engines, ...
    graph = import_graph(PACKAGE)
    assert "agora_optimizer.planning.problem" in graph["agora_optimizer.engines.base"]
    assert "agora_optimizer.engines.heft" in graph["agora_optimizer.optimize.portfolio"]
    assert "agora_optimizer.optimize.optimize" in graph["agora_optimizer.optimize.window"]  # function-local
    # ... and the upper layers' too: the listeners and the executor read placement from the model, the
    # plugin registers the view.
    assert "agora_optimizer.model.placement" in graph["agora_optimizer.runs.recorder"]
    assert "agora_optimizer.model.placement" in graph["agora_optimizer.integration.trace_listener"]
    assert "agora_optimizer.ui.app" in graph["agora_optimizer.plugin"]


def test_every_module_of_the_package_stands_in_a_layer() -> None:
    assert unplaced(PACKAGE, LAYERS) == []


FAKE_LAYERS = (("__init__", "base"), ("low",), ("high",))


def test_an_import_of_a_higher_layer_is_reported_even_from_inside_a_function(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "base.py": "VALUE = 1\n",
            "low/__init__.py": "",
            "low/a.py": "from fakepkg.high.b import helper\n",  # up, at module level
            "low/c.py": "def used():\n    from fakepkg.high import b  # up, when called\n\n    return b\n",
            "low/d.py": "import typing\n\nif typing.TYPE_CHECKING:\n    from fakepkg.high.b import helper\n",
            "low/e.py": "from fakepkg.base import VALUE\nfrom . import a\n",  # down, and within its layer
            "high/__init__.py": "",
            "high/b.py": "from fakepkg.low.e import VALUE\n\ndef helper():\n    return VALUE\n",  # down
            "stray.py": "from fakepkg.high.b import helper\n",  # in no layer
        },
    )
    assert upward_imports(package, FAKE_LAYERS, "low") == [
        "fakepkg.low.a (layer 1, low) imports fakepkg.high.b (layer 2, high)",
        "fakepkg.low.c (layer 1, low) imports fakepkg.high.b (layer 2, high)",
    ]
    assert upward_imports(package, FAKE_LAYERS, "high") == upward_imports(package, FAKE_LAYERS, "low")
    assert unplaced(package, FAKE_LAYERS) == ["stray"]


def test_an_import_of_a_module_in_no_layer_is_reported(tmp_path: Path) -> None:
    package = fake_package(tmp_path, {"base.py": "from fakepkg import stray\n", "stray.py": ""})
    assert upward_imports(package, FAKE_LAYERS, "base") == [
        "fakepkg.base (layer 0, base) imports fakepkg.stray (no layer, stray)"
    ]
