#!/bin/sh
# The function-trace benchmark on a real multi-threaded program
# (BENCHMARKS.md): zstd's library (the sources the zstd-sys crate bundles,
# a dependency of this workspace) built with -finstrument-functions and
# -DZSTD_MULTITHREAD, driven by zstd.c (two worker threads). In the same
# run, ROUNDS times: untraced, `ichnos trace`, `uftrace record`; medians
# of the wall time. Then each trace's per-function table (`ichnos report
# --trace`, `uftrace report`, once each, timed) and the calls of every
# function the two list, compared.
# Usage: ICHNOS=target/release/ichnos zstd.sh [ROUNDS] [SIZE]
set -eu
ROUNDS=${1:-3}
SIZE=${2:-8388608}
ICHNOS=${ICHNOS:-target/release/ichnos}
. "$(dirname "$0")/common.sh"
lib=$(cargo metadata -q --format-version 1 --manifest-path "$here/../../../Cargo.toml" |
    python3 -c 'import json, sys, os; m = json.load(sys.stdin); print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == "zstd-sys"))')/zstd/lib
gcc -O2 -g -finstrument-functions -pthread -DZSTD_MULTITHREAD -DZSTD_DISABLE_ASM \
    -I"$lib" -I"$lib/common" -o "$work/zstd" "$here/zstd.c" \
    "$lib"/common/*.c "$lib"/compress/*.c "$lib"/decompress/*.c
now() { date +%s.%N; }
took() { awk -v s="$1" -v e="$(now)" 'BEGIN {printf "%.3f", e - s}'; }
for r in $(seq "$ROUNDS"); do
    s=$(now); "$work/zstd" "$SIZE" >/dev/null; echo "untraced $(took "$s")" >>"$work/times"
    s=$(now); "$ICHNOS" trace -o "$work/full.data" -- "$work/zstd" "$SIZE" >/dev/null 2>"$work/full.err"
    echo "ichnos $(took "$s")" >>"$work/times"
    rm -rf "$work/uftrace.data"
    s=$(now); uftrace record -d "$work/uftrace.data" "$work/zstd" "$SIZE" >/dev/null 2>&1
    echo "uftrace $(took "$s")" >>"$work/times"
done
s=$(now); "$ICHNOS" report --trace --limit 0 -i "$work/full.data" >"$work/ichnos.txt" 2>/dev/null
echo "report-ichnos $(took "$s")" >>"$work/times"
s=$(now); uftrace report -d "$work/uftrace.data" >"$work/uftrace.txt" 2>/dev/null
echo "report-uftrace $(took "$s")" >>"$work/times"
per_call "size: $SIZE, rounds: $ROUNDS (medians of the wall time)" ichnos uftrace
echo "per-function table: ichnos report --trace $(median report-ichnos) s, uftrace report $(median report-uftrace) s"
# Calls per function: ichnos's columns are total, self, calls, avg, max
# (each time a number and a unit), uftrace's total, self, calls.
python3 - "$work/ichnos.txt" "$work/uftrace.txt" <<'PY'
import sys
def table(path, name_at):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) <= name_at or not f[4].isdigit():
            continue
        out[" ".join(f[name_at:])] = out.get(" ".join(f[name_at:]), 0) + int(f[4])
    return out
ours, theirs = table(sys.argv[1], 9), table(sys.argv[2], 5)
differ = sorted(n for n in ours if ours[n] != theirs.get(n))
print(f"functions ichnos lists: {len(ours)}; uftrace: {len(theirs)}; "
      f"calls differing: {len(differ)} {[(n, ours[n], theirs.get(n)) for n in differ[:10]]}")
print("uftrace only:", ", ".join(sorted(set(theirs) - set(ours))))
PY
echo "ichnos: $(tail -1 "$work/full.err")"
