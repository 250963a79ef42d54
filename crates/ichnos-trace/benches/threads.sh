#!/bin/sh
# The function-trace benchmark on several threads (BENCHMARKS.md): the
# same -finstrument-functions binary, THREADS threads each making N small
# calls at once, in the same run untraced, under `ichnos trace`, `ichnos
# trace --ring 64K` and `uftrace record`. Medians over ROUNDS of the
# program's own time; ns added per call of one thread (wall time).
# Usage: ICHNOS=target/release/ichnos threads.sh [ROUNDS] [N] [THREADS]
set -eu
ROUNDS=${1:-5}
N=${2:-5000000}
THREADS=${3:-2}
ICHNOS=${ICHNOS:-target/release/ichnos}
. "$(dirname "$0")/common.sh"
gcc -O2 -finstrument-functions -pthread -o "$work/threads" "$here/threads.c"
for r in $(seq "$ROUNDS"); do
    echo "untraced $("$work/threads" "$N" "$THREADS")" >>"$work/times"
    echo "ichnos $("$ICHNOS" trace -q -o "$work/full.data" -- "$work/threads" "$N" "$THREADS")" >>"$work/times"
    echo "ring $("$ICHNOS" trace -q --ring 64K -o "$work/ring.data" -- "$work/threads" "$N" "$THREADS")" >>"$work/times"
    rm -rf "$work/uftrace.data"
    echo "uftrace $(uftrace record -d "$work/uftrace.data" "$work/threads" "$N" "$THREADS" 2>/dev/null)" >>"$work/times"
done
base=$(median untraced)
echo "threads: $THREADS, calls each: $N, rounds: $ROUNDS (medians of the program's own time)"
printf "%-10s %10s %22s\n" tool seconds "ns added/call/thread"
printf "%-10s %10s %22s\n" untraced "$base" -
for t in ichnos ring uftrace; do
    m=$(median "$t")
    printf "%-10s %10s %22s\n" "$t" "$m" "$(awk -v t="$m" -v b="$base" -v n="$N" 'BEGIN {printf "%.1f", (t - b) * 1e9 / n}')"
done
