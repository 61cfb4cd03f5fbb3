#!/bin/sh
# Inductor's rounds (profile_last: its whole model, then its fused candidates solved for at their
# floors) replayed on a zoo_bench work directory whose optimize finished: every profile is kept, so
# nothing is timed again but what selection times; the last guided problem (Inductor's), the
# remembered selections and Inductor's boundary calibration are deleted, so the rounds solve again
# and calibrate Inductor as a new machine's first optimize would. The log says which calibration
# stages ran (its kernel start alone, or its pairs too) and how long each took.
#
#   sh benchmarks/profile_last_replay.sh WORK_DIR MODEL OUT_DIR [THREADS]
#
# WORK_DIR/MODEL-tTHREADS is zoo_bench's directory of the model (profile-cache, inductor-cache).
# OUT_DIR/log holds the -v log and the summary.
set -eu
work=$1; model=$2; out=$3; threads=${4:-2}
src="$work/$model-t$threads"
rm -rf "$out"; mkdir -p "$out"
cp -r "$src/profile-cache" "$out/cache"; cp -r "$src/inductor-cache" "$out/inductor-cache"
sqlite3 "$out/cache/profiles.sqlite" "delete from guided where created_at = (select max(created_at) from guided); \
    delete from selections; delete from boundaries where versions like '%inductor=%'; vacuum;"
export TORCHINDUCTOR_CACHE_DIR="$out/inductor-cache"
cd /tmp && python -m korch -v optimize "$model" --threads "$threads" --cache "$out/cache" -o "$out/plan" > "$out/log" 2>&1
grep -v "^profiling\|^compiling" "$out/log" | grep "calibrat\|inductor: [0-9]* of\|^stages" || true
