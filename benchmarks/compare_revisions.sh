#!/bin/bash
# Before/after, side by side: run spawn_latency and bootstrap_stages for an older checkout and this one,
# alternating, with the same interpreter (so only spawnkit's code differs), and keep the JSON of each run.
#   git worktree add --detach /tmp/spawnkit-base <REV>
#   bash benchmarks/compare_revisions.sh /tmp/spawnkit-base [OUT_DIR] [ROUNDS]
set -u
BASE=${1:?usage: compare_revisions.sh BASE_CHECKOUT [OUT_DIR] [ROUNDS]}
OUT=${2:-/tmp/spawnkit-compare}
ROUNDS=${3:-2}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
mkdir -p "$OUT"
for round in $(seq 1 "$ROUNDS"); do
  for side in base main; do
    if [ "$side" = base ]; then ROOT=$BASE; else ROOT=$HERE; fi
    for bench in spawn_latency bootstrap_stages; do
      echo "== round $round $side $bench"
      # Each checkout's own benchmark script puts its own src/ first on sys.path; PYTHONPATH makes
      # the spawned workers find the same one.
      (cd /tmp && PYTHONPATH="$ROOT/src" timeout 900 "$PY" "$ROOT/benchmarks/$bench.py" \
        --json "$OUT/${bench}_${side}_$round.json" > "$OUT/${bench}_${side}_$round.txt" 2>&1)
      echo "rc=$?"
    done
  done
done
echo "results in $OUT (one .txt and one .json per run)"
