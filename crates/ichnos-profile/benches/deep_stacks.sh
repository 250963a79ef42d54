#!/usr/bin/env bash
# Complete stacks on a program whose stacks are deeper than a sample's
# stack copy: clang++ (Debian's clang) compiling a C++ file that includes
# <regex>, <map> and <iostream> (about 3 s; the parser's recursive descent
# and template instantiation go past 32 KiB of stack). Each tool records
# the same compilation at 1 kHz (cpu-clock), RUNS times:
#
#   ichnos record                      (32 KiB copy, stacks read on past it)
#   ichnos record --no-stack-reads     (32 KiB copy alone)
#   ichnos record --stack-size 65528   (the most the kernel copies, read on)
#   perf record --call-graph dwarf     (perf's default 8 KiB copy)
#   perf record --call-graph dwarf,65528
#
# and every sample is counted by stacks.py --all: complete when its
# outermost frame is _start or clone3 (ichnos's folded stacks without
# inlined frames; perf script, which unwinds perf's copies with libdw or
# libunwind). Prints the median share of each.
#
# Peers: perf (Debian's linux-perf), clang, Python 3. Run as root or with
# perf_event_paranoid at 1 or below.
# Usage: deep_stacks.sh [RUNS]   (ICHNOS=path/to/ichnos)
set -euo pipefail
runs=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
start_in_scratch
cp "$here/deep.cc" .
compile=(clang++ -O2 -c deep.cc -o deep.o)
export XDG_CACHE_HOME="$work/cache"

# share OUT MODE FILE: appends "samples complete" of FILE to OUT.
share() { python3 "$here/stacks.py" "$2" "$3" --all >> "$1"; }

for _ in $(seq "$runs"); do
	"$ichnos" record -q --stack-size 32768 -o i.data -- "${compile[@]}"
	"$ichnos" report -q -i i.data --no-inline --format folded > i.folded
	share ichnos.txt folded i.folded
	"$ichnos" record -q --stack-size 32768 --no-stack-reads -o n.data -- "${compile[@]}"
	"$ichnos" report -q -i n.data --no-inline --format folded > n.folded
	share ichnos-copy.txt folded n.folded
	"$ichnos" record -q --stack-size 65528 -o w.data -- "${compile[@]}"
	"$ichnos" report -q -i w.data --no-inline --format folded > w.folded
	share ichnos-64k.txt folded w.folded
	perf record -q -e cpu-clock -F 1000 --call-graph dwarf -o p.data -- "${compile[@]}" 2> /dev/null
	perf script -i p.data > p.txt 2> /dev/null
	share perf.txt perf-script p.txt
	perf record -q -e cpu-clock -F 1000 --call-graph dwarf,65528 -o q.data -- "${compile[@]}" 2> /dev/null
	perf script -i q.data > q.txt 2> /dev/null
	share perf-64k.txt perf-script q.txt
done

printf '| tool | samples | complete stacks |\n|---|---:|---:|\n'
for t in "ichnos:ichnos" "ichnos-copy:ichnos --no-stack-reads" "ichnos-64k:ichnos --stack-size 65528" \
	"perf:perf --call-graph dwarf" "perf-64k:perf --call-graph dwarf,65528"; do
	file=${t%%:*}
	name=${t#*:}
	n=$(cut -d' ' -f1 "$file.txt" | median)
	pct=$(awk '{ printf "%.2f\n", 100 * $2 / ($1 > 0 ? $1 : 1) }' "$file.txt" | median)
	printf '| %s | %s | %s%% |\n' "$name" "$n" "$pct"
done
