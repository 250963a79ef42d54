#!/bin/sh
# The function-trace benchmark (BENCHMARKS.md): the same
# -finstrument-functions binary making N small calls, in the same run:
# untraced, `ichnos trace`, `ichnos trace --ring`, `uftrace record`, and
# the floor (two rdtsc reads per call). Each round runs every one once;
# the figures are medians over ROUNDS of the program's own timing.
# Usage: ICHNOS=target/release/ichnos trace.sh [ROUNDS] [N]
set -eu
ROUNDS=${1:-5}
N=${2:-10000000}
ICHNOS=${ICHNOS:-target/release/ichnos}
. "$(dirname "$0")/common.sh"
gcc -O2 -finstrument-functions -o "$work/calls" "$here/calls.c"
for r in $(seq "$ROUNDS"); do
    echo "untraced $("$work/calls" "$N")" >>"$work/times"
    echo "floor $("$work/calls" "$N" floor)" >>"$work/times"
    t=$("$ICHNOS" trace -o "$work/full.data" -- "$work/calls" "$N" 2>"$work/full.err")
    echo "ichnos $t" >>"$work/times"
    t=$("$ICHNOS" trace --ring 64K -o "$work/ring.data" -- "$work/calls" "$N" 2>/dev/null)
    echo "ring $t" >>"$work/times"
    rm -rf "$work/uftrace.data"
    t=$(uftrace record -d "$work/uftrace.data" "$work/calls" "$N" 2>"$work/uftrace.err")
    echo "uftrace $t" >>"$work/times"
done
base=$(median untraced)
floor=$(median floor)
ns() { awk -v t="$1" -v b="$2" -v n="$N" 'BEGIN {printf "%.1f", (t - b) * 1e9 / n}'; }
echo "calls: $N, rounds: $ROUNDS (medians of the program's own time)"
printf "%-22s %10s %16s\n" tool seconds "ns added/call"
printf "%-22s %10s %16s\n" untraced "$base" -
printf "%-22s %10s %16s\n" "floor (2x rdtsc)" "$floor" "$(awk -v f="$floor" -v n="$N" 'BEGIN {printf "%.1f", f*1e9/n}')"
for t in ichnos ring uftrace; do
    printf "%-22s %10s %16s\n" "$t" "$(median "$t")" "$(ns "$(median "$t")" "$base")"
done
full=$(stat -c %s "$work/full.data")
uft=$(du -sb "$work/uftrace.data" | cut -f1)
echo "bytes per call on disk: ichnos $(awk -v b="$full" -v n="$N" 'BEGIN {printf "%.2f", b/n}'), uftrace $(awk -v b="$uft" -v n="$N" 'BEGIN {printf "%.2f", b/n}')"
echo "ichnos: $(tail -1 "$work/full.err")"
grep -i lost "$work/uftrace.err" || echo "uftrace: no LOST message"
