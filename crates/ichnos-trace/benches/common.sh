# What the function-trace benchmark scripts share; sourced by each after
# it has read its arguments. Needs uftrace, the peer every script runs;
# makes $work, a directory removed at the end, and $here, the scripts'.
# `median NAME` is the median of the values the script recorded as lines
# "NAME VALUE" in $work/times; `per_call HEADLINE TOOL...` prints the
# figures per traced call.
command -v uftrace >/dev/null || { echo "uftrace is missing: apt-get install uftrace" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { grep "^$1 " "$work/times" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# per_call HEADLINE TOOL...: the calls (half the events `ichnos trace`
# counted in $work/full.err, an entry and an exit each), HEADLINE with
# them, each TOOL's median seconds and nanoseconds added per call against
# the median of "untraced", and the bytes per call on disk of
# $work/full.data and $work/uftrace.data.
per_call() {
    headline=$1
    shift
    events=$(sed -n 's/.* \([0-9,]*\) events.*/\1/p' "$work/full.err" | tr -d ,)
    calls=$((events / 2))
    base=$(median untraced)
    echo "$headline, calls: $calls"
    printf "%-10s %10s %16s\n" tool seconds "ns added/call"
    printf "%-10s %10s %16s\n" untraced "$base" -
    for t in "$@"; do
        m=$(median "$t")
        printf "%-10s %10s %16s\n" "$t" "$m" "$(awk -v t="$m" -v b="$base" -v n="$calls" 'BEGIN {printf "%.1f", (t - b) * 1e9 / n}')"
    done
    full=$(stat -c %s "$work/full.data")
    uft=$(du -sb "$work/uftrace.data" | cut -f1)
    echo "bytes per call on disk: ichnos $(awk -v b="$full" -v n="$calls" 'BEGIN {printf "%.2f", b/n}'), uftrace $(awk -v b="$uft" -v n="$calls" 'BEGIN {printf "%.2f", b/n}')"
}
