#!/bin/sh
# A cold `korch optimize` of one zoo model at one commit, with what a machine does once already done:
# the zoo export and the boundary calibration are copied from SOURCE (an earlier cache of the same
# model on this machine), every profile, selection, guided problem and feature is deleted, and the
# Inductor cache starts empty. Run it for two snapshots in turn (git worktree add DIR COMMIT) to A/B them.
# With RECALIBRATE=1 in the environment the boundary calibration is deleted too (a new machine's run).
#
#   sh benchmarks/cold_ab.sh SOURCE_CACHE SNAPSHOT_DIR MODEL OUT_DIR [THREADS]
#
# OUT_DIR/log holds the -v log, the summary and /usr/bin/time -v's figures (peak RSS).
set -eu
source=$1; snap=$2; model=$3; out=$4; threads=${5:-2}
rm -rf "$out"; mkdir -p "$out"
cp -r "$source/zoo" "$out/"
cp "$source/profiles.sqlite" "$out/"
sqlite3 "$out/profiles.sqlite" "delete from profiles; delete from selections; delete from guided; \
    delete from features; delete from sightings; drop table if exists refills; vacuum;"
if [ "${RECALIBRATE:-0}" = 1 ]; then sqlite3 "$out/profiles.sqlite" "delete from boundaries; vacuum;"; fi
export TORCHINDUCTOR_CACHE_DIR="$out/inductor-cache"
cd /tmp && PYTHONPATH="$snap" /usr/bin/time -v python -m korch -v optimize "$model" --threads "$threads" \
    --cache "$out" -o "$out/plan" > "$out/log" 2>&1
