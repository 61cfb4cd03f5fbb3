#!/bin/bash
# Measured selection alone, over a cache whose every candidate is profiled already (an exhaustive
# cache, as benchmarks/guided_replay.py takes): a copy of CACHE without its remembered selection,
# `korch -v optimize MODEL` on it, and the selection's log lines (each split plan's prediction, its
# in-plan times, the duels). ROOT: a korch checkout to run (a worktree of another commit, for an A/B;
# default: this one).
#
#     benchmarks/select_only.sh CACHE MODEL OUT [THREADS] [ROOT]
set -euo pipefail
cache=$1 model=$2 out=$3 threads=${4:-2}
root=${5:-$(cd "$(dirname "$0")/.." && pwd)}
rm -rf "$out"
cp -r "$cache" "$out"
python3 - "$out/profiles.sqlite" <<'PY'
import sqlite3, sys
with sqlite3.connect(sys.argv[1]) as db:
    db.execute("DELETE FROM selections")
PY
cd /tmp && PYTHONPATH=$root python3 -m korch -v optimize "$model" --threads "$threads" --cache "$out" -o "$out/plan" \
    > "$out.log" 2>&1
echo "== $model ($(git -C "$root" rev-parse --short HEAD), $(date -u +%H:%M:%SZ))"
grep "korch.select" "$out.log" | grep -v "BLP:"
