#!/usr/bin/env bash
# Export time and peak memory per format on one large recording: the
# benchmark workload (workload.c) recorded by `ichnos record -F 20000`
# for ROUNDS rounds (250000: about 1.3 million samples), then, RUNS times
# each (median), `ichnos report -q --format F -o OUT` for every format,
# timed by the wall clock, with its peak resident set (wait4's rusage,
# by cputime.c) and the file's size. The symbol index cache is warmed
# first, so every run symbolizes from indexes.
# Usage: exports.sh [RUNS] [ROUNDS]   (ICHNOS=path/to/ichnos)
set -euo pipefail
runs=${1:-3}
rounds=${2:-250000}
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
"$ichnos" record -q -F 20000 -o big.data -- ./workload "$rounds"
"$ichnos" report -q -i big.data > /dev/null
samples=$("$ichnos" report -i big.data --limit 1 | head -1 | sed 's/.*: \([0-9,]*\) samples.*/\1/')
printf 'recording: %s samples, %s KiB\n\n' "$samples" "$(( $(stat -c %s big.data) >> 10 ))"
printf '| format | time | peak memory | output |\n|---|---:|---:|---:|\n'
for format in top folded svg pprof speedscope firefox; do
	: > "$format.txt"
	for _ in $(seq "$runs"); do
		./cputime rusage.txt "$ichnos" report -q -i big.data --format "$format" -o "out.$format"
		awk '{ printf "%.3f %s\n", $4, $3 }' rusage.txt >> "$format.txt"
	done
	awk -v f="$format" -v t="$(cut -d' ' -f1 "$format.txt" | median)" -v r="$(cut -d' ' -f2 "$format.txt" | median)" -v z="$(stat -c %s "out.$format")" \
		'BEGIN { printf "| %s | %.3f s | %.0f MiB | %.0f KiB |\n", f, t, r / 1024, z / 1024 }'
done
