#!/usr/bin/env bash
# Recording a Rust build: `cargo check` of one of this workspace's crates
# (ichnos-symbol and its dependencies, about 40 rustc processes, offline,
# from a fresh target directory each time, of the sources as committed at
# HEAD), recorded at 1 kHz (cpu-clock) by each tool in turn, RUNS times:
#
#   ichnos record                      (32 KiB copy, stacks read on past it)
#   ichnos record --stack-size 65528   (the most the kernel copies, read on)
#   $ICHNOS_BEFORE record              (another build of ichnos, if given)
#   perf record --call-graph dwarf     (perf's default 8 KiB copy)
#
# rustc keeps 524 KiB of locals in one frame near the base of its thread
# (run_compiler's closure) and runs deep query stacks above it, and every
# rustc maps a 150 MB librustc_driver and a 200 MB LLVM: deep stacks, and
# much for a recorder to learn per process. Every sample is counted by
# stacks.py --all (complete when its outermost frame is _start or clone3);
# samples lost are the recording's own count (ichnos's closing line, perf
# report --stats). perf script runs with --no-inline (resolving inlined
# frames, it runs addr2line over rustc's libraries for hours). Prints the
# median of each, and the build's wall time.
#
# Peers: perf (Debian's linux-perf), cargo, bc, Python 3. Run as root or with
# perf_event_paranoid at 1 or below.
# Usage: rust_build.sh [RUNS] [CRATE]   (ICHNOS=path/to/ichnos,
#        ICHNOS_BEFORE=path/to/another/ichnos)
set -euo pipefail
runs=${1:-3}
crate=${2:-ichnos-symbol}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
start_in_scratch
mkdir src
git -C "$root" archive HEAD | tar -x -C src
build=(cargo check --offline -q --manifest-path "$work/src/Cargo.toml" -p "$crate")
export XDG_CACHE_HOME="$work/cache"

# ichnos_run NAME BINARY [ARGS]: records the build with BINARY, appends
# "samples complete lost seconds" to NAME.txt.
ichnos_run() {
	local name=$1 bin=$2
	shift 2
	rm -rf target
	local t0 t1
	t0=$(date +%s.%N)
	CARGO_TARGET_DIR=$work/target "$bin" record -o i.data "$@" -- "${build[@]}" 2> err.txt
	t1=$(date +%s.%N)
	local lost
	lost=$(grep -o '[0-9,]* lost' err.txt | tail -1 | tr -d ', lost')
	"$ichnos" report -q -i i.data --no-inline --format folded > i.folded
	echo "$(python3 "$here/stacks.py" folded i.folded --all) ${lost:-0} $(echo "$t1 - $t0" | bc)" >> "$name.txt"
}

for _ in $(seq "$runs"); do
	ichnos_run ichnos "$ichnos" --stack-size 32768
	ichnos_run ichnos-64k "$ichnos" --stack-size 65528
	if [ -n "${ICHNOS_BEFORE:-}" ]; then
		ichnos_run before "$ICHNOS_BEFORE"
	fi
	rm -rf target
	t0=$(date +%s.%N)
	CARGO_TARGET_DIR=$work/target perf record -q -e cpu-clock -F 1000 --call-graph dwarf -o p.data -- "${build[@]}" 2> /dev/null
	t1=$(date +%s.%N)
	lost=$(perf report -i p.data --stats 2> /dev/null | awk '/LOST /{ s += $NF } END { print s + 0 }')
	perf script --no-inline -i p.data > p.txt 2> /dev/null
	echo "$(python3 "$here/stacks.py" perf-script p.txt --all) $lost $(echo "$t1 - $t0" | bc)" >> perf.txt
	rm -f p.data p.txt
done

printf '| tool | samples | lost | complete stacks | build seconds |\n|---|---:|---:|---:|---:|\n'
tools=("ichnos:ichnos" "ichnos-64k:ichnos --stack-size 65528")
if [ -n "${ICHNOS_BEFORE:-}" ]; then
	tools+=("before:ichnos, before ($ICHNOS_BEFORE)")
fi
tools+=("perf:perf --call-graph dwarf")
for t in "${tools[@]}"; do
	file=${t%%:*}
	name=${t#*:}
	n=$(cut -d' ' -f1 "$file.txt" | median)
	lost=$(cut -d' ' -f3 "$file.txt" | median)
	pct=$(awk '{ printf "%.2f\n", 100 * $2 / ($1 > 0 ? $1 : 1) }' "$file.txt" | median)
	secs=$(cut -d' ' -f4 "$file.txt" | median)
	printf '| %s | %s | %s | %s%% | %s |\n' "$name" "$n" "$lost" "$pct" "$secs"
done
