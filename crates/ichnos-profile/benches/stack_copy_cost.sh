#!/usr/bin/env bash
# What the size of the stack copy costs a program with deep stacks:
# clang++ compiling a C++ file that includes <regex>, <map> and
# <iostream> (the workload of deep_stacks.sh, about 3 s), ROUNDS times in
# turn alone, under `ichnos record` (32 KiB copy) and under `ichnos
# record --stack-size 65528` (the most the kernel copies), at 1 kHz.
# For each run: the compiler's wall and CPU time (user + system, by GNU
# time inside the recording), the recorder's own CPU time (GNU time of
# the whole recording less the compiler's), the samples and the share of
# complete stacks. Prints the medians, and each profiled run's added
# time against the unprofiled run of its own round (paired). The two
# sizes run in turns: 32 KiB first in odd rounds, 65,528 first in even
# ones (a fixed order would favour whichever runs with warmer caches).
#
# Peers: clang, GNU time (/usr/bin/time), bc, Python 3. Run as root or with
# perf_event_paranoid at 1 or below.
# Usage: stack_copy_cost.sh [ROUNDS]   (ICHNOS=path/to/ichnos)
set -euo pipefail
rounds=${1:-9}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
start_in_scratch
cp "$here/deep.cc" .
compile=(/usr/bin/time -f "%e %U %S" -o inner.txt clang++ -O2 -c deep.cc -o deep.o)
export XDG_CACHE_HOME="$work/cache"

# cpu FILE: user + system seconds of a GNU time line "wall user sys".
cpu() { awk '{ printf "%.3f\n", $2 + $3 }' "$1"; }
wall() { awk '{ print $1 }' "$1"; }

for round in $(seq "$rounds"); do
	"${compile[@]}"
	base_wall=$(wall inner.txt)
	base_cpu=$(cpu inner.txt)
	echo "$base_wall $base_cpu" >> alone.txt
	sizes=(32768 65528)
	if [ $((round % 2)) -eq 0 ]; then
		sizes=(65528 32768)
	fi
	for size in "${sizes[@]}"; do
		/usr/bin/time -f "%e %U %S" -o outer.txt \
			"$ichnos" record -q --stack-size "$size" -o i.data -- "${compile[@]}"
		"$ichnos" report -q -i i.data --no-inline --format folded > i.folded
		read -r n complete < <(python3 "$here/stacks.py" folded i.folded --all)
		recorder=$(echo "$(cpu outer.txt) - $(cpu inner.txt)" | bc)
		added_wall=$(echo "scale=4; 100 * ($(wall inner.txt) - $base_wall) / $base_wall" | bc)
		added_cpu=$(echo "scale=4; 100 * ($(cpu inner.txt) - $base_cpu) / $base_cpu" | bc)
		echo "$(wall inner.txt) $(cpu inner.txt) $recorder $n $complete $added_wall $added_cpu" >> "copy-$size.txt"
	done
done

printf 'unprofiled: %s s wall, %s s CPU (medians)\n\n' \
	"$(cut -d' ' -f1 alone.txt | median)" "$(cut -d' ' -f2 alone.txt | median)"
printf '| copy | compiler wall | added (paired) | compiler CPU | added (paired) | recorder CPU | per sample | samples | complete stacks |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for size in 32768 65528; do
	f=copy-$size.txt
	per=$(awk '{ printf "%.1f\n", 1e6 * $3 / ($4 > 0 ? $4 : 1) }' "$f" | median)
	pct=$(awk '{ printf "%.2f\n", 100 * $5 / ($4 > 0 ? $4 : 1) }' "$f" | median)
	printf '| %s | %s s | %+.2f%% | %s s | %+.2f%% | %s s | %s µs | %s | %s%% |\n' "$size" \
		"$(cut -d' ' -f1 "$f" | median)" "$(cut -d' ' -f6 "$f" | median)" \
		"$(cut -d' ' -f2 "$f" | median)" "$(cut -d' ' -f7 "$f" | median)" \
		"$(cut -d' ' -f3 "$f" | median)" "$per" "$(cut -d' ' -f4 "$f" | median)" "$pct"
done
