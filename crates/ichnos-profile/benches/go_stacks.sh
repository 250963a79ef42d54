#!/usr/bin/env bash
# Stacks through a Go program, whole and stripped: the goroutine fixture
# of the profiler's tests (crates/ichnos/tests/fixtures/profile/
# goroutines.go; four goroutines in leaf <- middle <- a closure), built
# by Go's own linker, and a copy stripped of its symbols and DWARF (as
# `go build -ldflags=-s -w` and distributions' Go programs are). Each
# tool records each program at 1 kHz (cpu-clock), RUNS times:
#
#   ichnos record
#   perf record --call-graph dwarf   (.debug_frame; 8 KiB copy)
#   perf record -g                   (the frame-pointer chain Go keeps)
#
# For the samples whose innermost frame is main.leaf (where the time
# is), it counts those whose whole stack is gdb's backtrace at main.leaf
# of the unstripped program (runtime.goexit, main.main.func2,
# main.main.func1, main.middle, main.leaf). Prints the median share.
#
# Peers: go (golang-go), perf (linux-perf), gdb, binutils. Run as root
# or with perf_event_paranoid at 1 or below.
# Usage: go_stacks.sh [RUNS]   (ICHNOS=path/to/ichnos)
set -euo pipefail
runs=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
start_in_scratch
GOCACHE="$work/cache" GOPATH="$work/gopath" CGO_ENABLED=0 \
	go build -o goroutines "$root/crates/ichnos/tests/fixtures/profile/goroutines.go"
strip -o stripped goroutines
gdb -batch -nx -ex 'break main.leaf' -ex run -ex bt ./goroutines 2>/dev/null |
	awk '/^#/ { for (i = 2; i <= NF; i++) if ($i !~ /^0x/ && $i != "in") { print $i; break } }' |
	grep -v '^??$' > chain.txt

# exact MODE FILE: "samples exact" of the samples in main.leaf.
exact() {
	python3 - "$1" "$2" chain.txt <<'PY'
import sys
mode, path, chain = sys.argv[1], sys.argv[2], open(sys.argv[3]).read().split()
# perf names assembly functions by their ABI0 symbols (runtime.goexit.abi0),
# gdb and ichnos by their DWARF or function-table names: the same function.
def plain(name):
    return name[: -len(".abi0")] if name.endswith(".abi0") else name
want = [plain(f) for f in chain]  # innermost first
samples = exact = 0
def count(frames):  # innermost first
    global samples, exact
    if frames and frames[0] == "main.leaf":
        samples += 1
        exact += [plain(f) for f in frames] == want
if mode == "folded":
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        frames = stack.split(";")[1:][::-1]
        if frames and frames[0] == "main.leaf":
            samples += int(n)
            exact += int(n) if [plain(f) for f in frames] == want else 0
else:
    frames = []
    for line in open(path, errors="replace"):
        if not line.strip():
            count(frames)
            frames = []
        elif line[0] in " \t":
            parts = line.split()
            if len(parts) >= 2:
                frames.append(parts[1].split("+")[0])
    count(frames)
print(samples, exact)
PY
}

for _ in $(seq "$runs"); do
	for program in goroutines stripped; do
		"$ichnos" record -q -o i.data -- "./$program"
		"$ichnos" report -q -i i.data --no-inline --format folded > i.folded
		exact folded i.folded >> "ichnos-$program.txt"
		for graph in dwarf fp; do
			perf record -q -e cpu-clock -F 1000 --call-graph "$graph" -o p.data -- "./$program" 2> /dev/null
			perf script -i p.data 2> /dev/null > p.txt
			exact perf-script p.txt >> "perf-$graph-$program.txt"
		done
	done
done

printf '| tool | program | samples in main.leaf | whole stack as gdb shows it |\n|---|---|---:|---:|\n'
for t in "ichnos:ichnos" "perf-dwarf:perf --call-graph dwarf" "perf-fp:perf -g"; do
	for program in goroutines stripped; do
		file="${t%%:*}-$program.txt"
		n=$(cut -d' ' -f1 "$file" | median)
		pct=$(awk '{ printf "%.2f\n", 100 * $2 / ($1 > 0 ? $1 : 1) }' "$file" | median)
		printf '| %s | %s | %s | %s%% |\n' "${t#*:}" "$program" "$n" "$pct"
	done
done
