#!/bin/bash
# The resident memory of a running process and its children over time: where an optimize peaks.
#
#     python -m korch -v optimize MODEL -o PLAN --threads T --cache DIR > LOG 2>&1 &
#     benchmarks/rss_timeline.sh $! OUT
#
# Appends "SECONDS MB MAIN_MB [CHILD:MB ...]" to OUT every 0.25 s (seconds since the sampler started;
# MB summed over the process and its direct children, then the process's own, then each child's with
# its program, e.g. korch.profile.ahead for a compile worker) until the process exits; the last line
# reads 0. Set the log's
# stage lines ("stages ...", "profile: seconds by phase", "side by side ...") beside the samples to
# see which step a peak belongs to. A peak shorter than 0.25 s can be missed: ru_maxrss (as
# benchmarks/zoo_bench.py reads it) is the exact peak, this the when.
pid=$1; out=$2; t0=$(date +%s.%N)
while kill -0 "$pid" 2>/dev/null; do
  kids=$(pgrep -P "$pid" | tr '\n' ' ')
  # shellcheck disable=SC2086  # (kids: a list of pids)
  rss=$(ps -o rss= -p "$pid" $kids 2>/dev/null | awk '{s+=$1} END {print int(s/1024)}')
  main=$(ps -o rss= -p "$pid" 2>/dev/null | awk '{print int($1/1024)}')
  # shellcheck disable=SC2086
  each=$(for k in $kids; do ps -o rss=,args= -p "$k" 2>/dev/null | awk '{printf "%s:%d ", ($3 == "-m" ? $4 : $2), $1/1024}'; done)
  echo "$(echo "$(date +%s.%N) - $t0" | bc) $rss $main $each" >> "$out"
  sleep 0.25
done
