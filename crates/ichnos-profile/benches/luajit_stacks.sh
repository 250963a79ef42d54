#!/usr/bin/env bash
# Complete stacks through JIT code described to debuggers: LuaJIT 2.1
# (from the `lupa` sdist on PyPI, which bundles its source), built with
# -fomit-frame-pointer and LUAJIT_USE_GDBJIT (its traces handed to
# debuggers as ELF objects with .eh_frame) and LUAJIT_USE_PERFTOOLS
# (their names in /tmp/perf-PID.map, which perf reads), runs a script
# whose time is in compiled traces. Each tool records it at 1 kHz
# (cpu-clock), RUNS times:
#
#   ichnos record                   (reads the GDB JIT objects)
#   perf record --call-graph dwarf  (perf's default 8 KiB copy; names
#                                    traces from the perf map)
#
# and every sample is counted by stacks.py --all: complete when its
# outermost frame is _start. Prints the median share of each, and the
# share of samples whose innermost frame is a named trace.
#
# Peers: perf (Debian's linux-perf), gcc, make, curl, Python 3. Run as
# root or with perf_event_paranoid at 1 or below.
# Usage: luajit_stacks.sh [RUNS]   (ICHNOS=path/to/ichnos)
set -euo pipefail
runs=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
start_in_scratch
url=$(curl -fsSL https://pypi.org/simple/lupa/ |
	grep -o 'https://files.pythonhosted.org/[^"#]*/lupa-2\.8\.tar\.gz' | head -1)
curl -fsSL -o lupa.tar.gz "$url"
tar xzf lupa.tar.gz
make -s -C lupa-2.8/third-party/luajit21 -j2 \
	XCFLAGS="-DLUAJIT_USE_GDBJIT -DLUAJIT_USE_PERFTOOLS" CCOPT="-O2 -fomit-frame-pointer" > build.log 2>&1
cp lupa-2.8/third-party/luajit21/src/luajit .
cat > traces.lua <<'LUA'
local function inner(x) local s = 0 for i = 1, 200 do s = s + (x * i) % 7 end return s end
local function outer(n) local t = 0 for j = 1, n do t = t + inner(j) end return t end
local total = 0
for _ = 1, 2000 do total = total + outer(2000) end
print(total)
LUA
export XDG_CACHE_HOME="$work/cache"

# share OUT MODE FILE: appends "samples complete" of FILE to OUT.
share() { python3 "$here/stacks.py" "$2" "$3" --all >> "$1"; }
# traced OUT FILE: appends the share of samples whose innermost frame
# names a trace (TRACE_N, with or without perf's ::file:line).
traced() { awk -v out="$1" '
	{ n = $NF; total += n; if ($0 ~ /TRACE_[0-9]+[^;]* [0-9]+$/) named += n }
	END { printf "%.2f\n", 100 * named / (total > 0 ? total : 1) >> out }' "$2"; }

for _ in $(seq "$runs"); do
	"$ichnos" record -q -o i.data -- ./luajit traces.lua > /dev/null
	"$ichnos" report -q -i i.data --no-inline --format folded > i.folded
	share ichnos.txt folded i.folded
	traced ichnos-named.txt i.folded
	perf record -q -e cpu-clock -F 1000 --call-graph dwarf -o p.data -- ./luajit traces.lua > /dev/null 2>&1
	perf script -i p.data > p.txt 2> /dev/null
	share perf.txt perf-script p.txt
	perf report -i p.data --no-children --sort sym --stdio -q 2> /dev/null |
		awk '/%/ { v = $1; sub("%", "", v); if ($0 ~ /TRACE_[0-9]+/) named += v } END { printf "%.2f\n", named }' >> perf-named.txt
done

printf '| tool | samples | complete stacks | samples in named traces |\n|---|---:|---:|---:|\n'
for t in "ichnos:ichnos" "perf:perf --call-graph dwarf"; do
	file=${t%%:*}
	name=${t#*:}
	n=$(cut -d' ' -f1 "$file.txt" | median)
	pct=$(awk '{ printf "%.2f\n", 100 * $2 / ($1 > 0 ? $1 : 1) }' "$file.txt" | median)
	named=$(median < "$file-named.txt")
	printf '| %s | %s | %s%% | %s%% |\n' "$name" "$n" "$pct" "$named"
done
