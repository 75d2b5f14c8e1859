#!/usr/bin/env bash
# The main job on the embedded defaults: optimize a bundled real workflow on the bundled AWS
# catalog, compare it with the one-type default, check the plan, and draw its Gantt chart.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source scripts/bootstrap.sh
WORKFLOW="${1:-workflows/montage-chameleon-2mass-01d-001.json}"
CATALOG="${CATALOG:-catalogs/aws-us-east-1.yaml}"
# Output goes outside the repository: $AGORA_DEMO_OUT, else a new temporary directory.
OUT="${AGORA_DEMO_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/agora-demo.XXXXXX")}"
mkdir -p "$OUT"
name="$(basename "$WORKFLOW" .json)"
agora optimize "$WORKFLOW" --catalog "$CATALOG" --objective "${OBJECTIVE:-balanced}" \
  --time-limit-s "${TIME_LIMIT_S:-60}" --out "$OUT/$name.plan.json"
agora validate "$OUT/$name.plan.json" --workflow "$WORKFLOW" --catalog "$CATALOG"
agora gantt "$OUT/$name.plan.json" --workflow "$WORKFLOW" --out "$OUT/$name.gantt.png"
# Then the example pipeline in a real Airflow 3.3 (SQLite) with the AgoraExecutor on the local
# pools of catalogs/local.yaml: planned, put in force, run, and traced (AIRFLOW_DEMO=0 skips it).
if [ "${AIRFLOW_DEMO:-1}" != "0" ]; then
  python scripts/run_example_dag.py --out "$OUT/airflow"
fi
echo "demo output: $OUT"
