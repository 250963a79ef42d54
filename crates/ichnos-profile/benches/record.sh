#!/usr/bin/env bash
# The profiler side by side: ichnos record, perf record --call-graph dwarf,
# perf record -g and samply record, on one workload built with -O2
# -fomit-frame-pointer -Wa,--gsframe (workload.c: two threads, a fixed
# amount of work), at 1 kHz, in the same run. For each tool, over RUNS
# runs (median): the workload's slowdown against the unprofiled run of
# the same round (by its own clock; with the quartiles of those paired
# slowdowns, the spread a difference between tools must beat), the
# workload's own CPU time against the same (what sampling costs it in the
# kernel), the recorder's CPU time while the work ran (the workload reads
# its parent's) against the work's, the two together (all the CPU the tool
# takes while the target runs: on a workload that keeps every CPU busy,
# the slowdown without the wall clock's noise), the recorder's own CPU
# time per sample over the whole run (the recorder's and
# its child's CPU time, less the workload's own), the recording's size,
# the report's time (ichnos report; perf report --stdio, which unwinds a
# dwarf recording then), and the share of the workload's samples whose
# stack is complete (counted by stacks.py the same way for every tool).
#
# Peers: perf (Debian's linux-perf), samply (cargo install samply; run
# only where it is installed), Python 3, gcc. Run as root (samply needs
# perf_event_paranoid 1, which is set for its runs and put back).
# Usage: record.sh [RUNS] [ROUNDS]   (ICHNOS=path/to/ichnos)
set -euo pipefail
runs=${1:-5}
rounds=${2:-20000}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
root=$(cd "$here/../../.." && pwd)
ichnos=${ICHNOS:-$root/target/release/ichnos}
samply=${SAMPLY:-$(command -v samply || echo "$HOME/.cargo/bin/samply")}
work=$(mktemp -d)
# samply refuses to start above perf_event_paranoid 1 even as root (perf
# and ichnos run as root are not held to it): it is lowered for samply's
# runs only, and put back on the way out whatever happens.
paranoid=/proc/sys/kernel/perf_event_paranoid
was=$(cat "$paranoid")
trap 'rm -rf "$work"; echo "$was" > "$paranoid" 2> /dev/null || true' EXIT
gcc -O2 -g -fomit-frame-pointer -Wa,--gsframe -pthread -o "$work/workload" "$here/workload.c"
gcc -O2 -o "$work/cputime" "$here/cputime.c"
cputime() { "$work/cputime" "$@"; }
export WORKLOAD_OUT="$work/self.txt"
# A symbol index cache of the run's own: the first report makes the
# indexes (glibc's, from libc6-dbg), and its time is shown apart.
export XDG_CACHE_HOME="$work/cache"
cd "$work"


# Seconds since $1 (an $EPOCHREALTIME).
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.4f", b - a }'; }

# run TOOL: one run; appends "elapsed_ns cpu_per_sample_us bytes samples
# complete report_s workload_cpu_ns recorder_cpu_during_ns" to TOOL.txt
# (tool "none": "elapsed_ns workload_cpu_ns", the workload alone).
run() {
	local tool=$1 data t0
	case $tool in
	none) ./workload "$rounds"
		cut -d' ' -f1,2 self.txt >> none.txt
		return ;;
	ichnos) data=run.data
		cputime time.txt "$ichnos" record -q -F 1000 -o "$data" -- ./workload "$rounds"
		t0=$EPOCHREALTIME
		"$ichnos" report -i "$data" --no-inline --format folded > stacks.txt
		[ -f first_report.txt ] || since "$t0" > first_report.txt
		read -r samples complete < <(python3 "$here/stacks.py" folded stacks.txt)
		t0=$EPOCHREALTIME
		"$ichnos" report -q -i "$data" > /dev/null
		report=$(since "$t0") ;;
	perf-dwarf|perf-fp) data=perf.data
		local graph=dwarf; [ "$tool" = perf-fp ] && graph=fp
		cputime time.txt perf record -q -e cpu-clock -F 1000 --call-graph "$graph" -o "$data" -- ./workload "$rounds"
		perf script -i "$data" > script.txt 2> /dev/null
		read -r samples complete < <(python3 "$here/stacks.py" perf-script script.txt)
		t0=$EPOCHREALTIME
		perf report -i "$data" --stdio > /dev/null 2>&1
		report=$(since "$t0") ;;
	samply) data=profile.json.gz
		[ "$was" -gt 1 ] && echo 1 > "$paranoid"
		cputime time.txt "$samply" record --save-only --unstable-presymbolicate -r 1000 -o "$data" -- ./workload "$rounds" > /dev/null 2>&1
		echo "$was" > "$paranoid"
		read -r samples complete < <(python3 "$here/stacks.py" samply "$data")
		report=- ;;
	esac
	read -r elapsed self_cpu during < self.txt
	read -r user sys _ < time.txt
	local bytes
	bytes=$(stat -c %s "$data")
	awk -v e="$elapsed" -v u="$user" -v s="$sys" -v c="$self_cpu" -v n="$samples" \
		-v k="$complete" -v z="$bytes" -v r="$report" -v d="$during" \
		'BEGIN { printf "%.0f %.2f %.0f %d %d %s %.0f %.0f\n", e, ((u + s) * 1e9 - c) / 1e3 / (n > 0 ? n : 1), z, n, k, r, c, d }' >> "$tool.txt"
	rm -f "$data" "$data.old"
}

tools="ichnos perf-dwarf perf-fp"
[ -x "$samply" ] && tools="$tools samply"
# Unprofiled runs between the profiled ones: each round measures the
# machine as it is then.
for _ in $(seq "$runs"); do
	for tool in none $tools; do
		run "$tool"
	done
done
base=$(cut -d' ' -f1 none.txt | median)
printf '%s\n' "unprofiled: $(awk -v b="$base" 'BEGIN { printf "%.3f s", b / 1e9 }') (median of $runs)"

# paired FIELD TOOL: per round, TOOL's FIELD over the unprofiled run's
# of the same round, less one: the machine's drift between rounds
# cancels, and the spread of these is what a difference must beat.
# none.txt has two fields (elapsed, CPU time), so TOOL's FIELD is 2 + FIELD.
paired() { paste -d' ' none.txt "$2.txt" | awk -v f="$1" '{ print $(2 + f) / $f - 1 }'; }
# quartile Q: the Q-th quartile (1 or 3) of the numbers on stdin.
quartile() { sort -g | awk -v q="$1" '{ v[NR] = $1 } END { i = int((NR - 1) * q / 4 + 0.5) + 1; print v[i] }'; }

printf '\n| tool | slowdown (quartiles) | workload CPU | recorder CPU while it runs | CPU taken in all (quartiles) | recorder CPU per sample | file | bytes per sample | report | complete stacks |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for tool in $tools; do
	f=$tool.txt
	slow=$(paired 1 "$tool" | median)
	q1=$(paired 1 "$tool" | quartile 1)
	q3=$(paired 1 "$tool" | quartile 3)
	# The workload's own CPU time: what sampling costs it in the kernel.
	self=$(paste -d' ' none.txt "$f" | awk '{ print $9 / $2 - 1 }' | median)  # field 7 of TOOL's
	# The recorder's CPU time while the work ran (field 8, read by the
	# workload from its parent's schedstat), against the work's own CPU
	# time: what the recorder takes from a workload that keeps every CPU
	# busy. With the workload's own growth it is all the CPU the tool
	# takes while the target runs, a measure of the slowdown without the
	# wall clock's noise.
	during=$(paste -d' ' none.txt "$f" | awk '{ print $10 / $2 }' | median)
	taken() { paste -d' ' none.txt "$f" | awk '{ print ($9 - $2 + $10) / $2 }'; }
	all=$(taken | median)
	a1=$(taken | quartile 1)
	a3=$(taken | quartile 3)
	cpu=$(cut -d' ' -f2 "$f" | median)
	bytes=$(cut -d' ' -f3 "$f" | median)
	samples=$(cut -d' ' -f4 "$f" | median)
	complete=$(awk '{ print $5 / ($4 > 0 ? $4 : 1) }' "$f" | median)
	report=-
	if ! grep -q ' - ' "$f"; then report=$(cut -d' ' -f6 "$f" | median); fi
	awk -v t="$tool" -v s="$slow" -v q1="$q1" -v q3="$q3" -v w="$self" -v d="$during" -v a="$all" -v a1="$a1" -v a3="$a3" -v c="$cpu" -v b="$bytes" -v n="$samples" -v k="$complete" -v r="${report:--}" \
		'BEGIN { printf "| %s | %+.1f%% (%+.1f%% .. %+.1f%%) | %+.1f%% | %.2f%% | %+.2f%% (%+.2f%% .. %+.2f%%) | %.1f µs | %.0f KiB | %.0f | %s | %.2f%% of %d |\n", t, s * 100, q1 * 100, q3 * 100, w * 100, d * 100, a * 100, a1 * 100, a3 * 100, c, b / 1024, b / (n > 0 ? n : 1), (r == "-" || r == "") ? "-" : sprintf("%.4f s", r), k * 100, n }'
done
printf '\nichnos report, the first on a fresh index cache (indexing what has megabytes of DWARF): %s s\n' "$(cat first_report.txt)"
