#!/usr/bin/env bash
# ichnos report against perf report on one perf.data file, same run: a
# recording of the benchmark workload (workload.c, built -O2
# -fomit-frame-pointer -Wa,--gsframe) made by `perf record -e cpu-clock
# -F 1000 --call-graph dwarf` (perf's default 8 KiB stack copies). For
# each tool, over RUNS runs (median): the wall time of a text report of
# the file, from the tool's start to its end (`ichnos report FILE` with its symbol index cache warm, the
# first on a fresh cache shown apart; `perf report -i FILE --stdio`,
# which unwinds the stack copies then), its peak memory (maximum resident
# set, from wait4's rusage), and the share of the workload's samples with
# a complete stack (stacks.py, the same count for both: ichnos's folded
# stacks, and `perf script`, which unwinds as perf report does).
#
# Peers: perf (Debian's linux-perf), Python 3, gcc. Run as root or with
# perf_event_paranoid at 1 or below.
# Usage: perf_data.sh [RUNS] [ROUNDS]   (ICHNOS=path/to/ichnos)
set -euo pipefail
runs=${1:-5}
rounds=${2:-40000}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
root=$(cd "$here/../../.." && pwd)
ichnos=${ICHNOS:-$root/target/release/ichnos}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fomit-frame-pointer -Wa,--gsframe -pthread -o "$work/workload" "$here/workload.c"
gcc -O2 -o "$work/cputime" "$here/cputime.c"
export XDG_CACHE_HOME="$work/cache"
export WORKLOAD_OUT="$work/self.txt"
cd "$work"
perf record -q -e cpu-clock -F 1000 --call-graph dwarf -o perf.data -- ./workload "$rounds" > /dev/null 2>&1

# timed OUT CMD...: appends "seconds max_rss_kib" of one run of CMD to
# OUT: the wall time cputime measures from just before it starts CMD to
# CMD's end (the shell's own start of cputime, about a millisecond here,
# is no tool's time: it would weigh on the faster tool's figure alone).
timed() {
	local out=$1
	shift
	./cputime rusage.txt "$@" > /dev/null 2>&1
	awk '{ printf "%.4f %s\n", $4, $3 }' rusage.txt >> "$out"
}

first=$( { t0=$EPOCHREALTIME; "$ichnos" report -q perf.data > /dev/null; awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; } )
for _ in $(seq "$runs"); do
	timed ichnos.txt "$ichnos" report -q perf.data
	timed perf.txt perf report -i perf.data --stdio
done
"$ichnos" report -q perf.data --no-inline --format folded > folded.txt
read -r ours_n ours_c < <(python3 "$here/stacks.py" folded folded.txt)
perf script -i perf.data > script.txt 2> /dev/null
read -r perf_n perf_c < <(python3 "$here/stacks.py" perf-script script.txt)
samples=$(perf script -i perf.data -F tid 2> /dev/null | wc -l)

printf 'perf.data: %s samples, %s MiB\n\n' "$samples" "$(( $(stat -c %s perf.data) >> 20 ))"
printf '| tool | report | peak memory | complete stacks |\n|---|---:|---:|---:|\n'
for tool in ichnos perf; do
	secs=$(cut -d' ' -f1 "$tool.txt" | median)
	rss=$(cut -d' ' -f2 "$tool.txt" | median)
	if [ "$tool" = ichnos ]; then n=$ours_n; c=$ours_c; else n=$perf_n; c=$perf_c; fi
	awk -v t="$tool" -v s="$secs" -v r="$rss" -v n="$n" -v c="$c" \
		'BEGIN { printf "| %s | %.3f s | %.0f MiB | %.2f%% of %d |\n", t, s, r / 1024, 100 * c / (n > 0 ? n : 1), n }'
done
printf '\nichnos report, the first on a fresh index cache: %s s\n' "$first"
