"""Does the shipped predictor give the same answers under other library versions?

The model in models/predictor was trained under one numpy and scikit-learn; a fresh install on a
newer Python may get newer ones. This script asks the model's two estimators (runtime and memory)
for every category it learned, crossed with input and output sizes and core counts, and writes the
raw answers; run it under two interpreters and compare:

    PYTHONPATH=. .venv/bin/python bench/predictor_portability.py dump /tmp/a.json
    PYTHONPATH=. OTHER_VENV/bin/python bench/predictor_portability.py dump /tmp/b.json
    python3 bench/predictor_portability.py compare /tmp/a.json /tmp/b.json

The other interpreter needs only numpy, scikit-learn, scipy, pandas, skops and PyYAML besides the
repository on PYTHONPATH. ``compare`` prints both numpy versions, the number of answers and the
largest relative difference, and exits 1 if any answer differs by more than 1e-9.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "predictor"
TOLERANCE = 1e-9


def dump(out: Path) -> None:
    import numpy as np
    import pandas as pd
    import sklearn

    from agora_optimizer.predict.model_store import HISTORY_FILE, load_predictor

    predictor = load_predictor(MODEL_DIR)
    history = json.loads((MODEL_DIR / HISTORY_FILE).read_text(encoding="utf-8"))
    categories, operators = history["categories"], history["operators"]
    rows = [
        {
            "category": category,
            "operator": operators[i % len(operators)],
            "task_stem": category,
            "log_input_bytes": log_in,
            "log_output_bytes": log_out,
            "log_input_files": log_files,
            "log_output_files": log_files / 2,
            "cores": cores,
        }
        for (i, category), log_in, log_out, log_files, cores in itertools.product(
            enumerate([*categories, "never-seen"]), (0.0, 10.0, 20.0), (0.0, 15.0), (0.0, 2.0), (1, 4)
        )
    ]
    frame = pd.DataFrame(rows)
    answers = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scikit-learn": sklearn.__version__,
        "runtime": [float(v) for v in predictor.runtime_model.predict(frame)],
        "memory": [float(v) for v in predictor.memory_model.predict(frame)],
    }
    out.write_text(json.dumps(answers), encoding="utf-8")


def compare(first: Path, second: Path) -> int:
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (first, second))
    pairs = list(zip(a["runtime"] + a["memory"], b["runtime"] + b["memory"], strict=True))
    worst = max(abs(x - y) / max(abs(x), 1e-12) for x, y in pairs)
    for run in (a, b):
        print(f"python {run['python']}, numpy {run['numpy']}, scikit-learn {run['scikit-learn']}")
    counts = f"{len(a['runtime'])} runtime, {len(a['memory'])} memory"
    print(f"{len(pairs)} answers ({counts}); largest relative difference {worst:.3g}")
    return 0 if worst <= TOLERANCE else 1


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "dump":
        dump(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
