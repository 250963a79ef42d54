#!/bin/sh
# The function-trace benchmark on a real program (BENCHMARKS.md): SQLite
# (its amalgamation, from the libsqlite3-sys crate's bundled sources,
# fetched by cargo) built with -finstrument-functions, driven by
# sqlite.c. In the same run, ROUNDS times: untraced, `ichnos trace`,
# `ichnos trace --ring 64K`, `uftrace record`; medians of the program's
# own time. Then the per-function table of each trace: `ichnos report
# --trace` against `uftrace report`, ROUNDS alternating runs.
# Usage: ICHNOS=target/release/ichnos sqlite.sh [ROUNDS] [ROWS]
set -eu
ROUNDS=${1:-5}
ROWS=${2:-20000}
ICHNOS=${ICHNOS:-target/release/ichnos}
. "$(dirname "$0")/common.sh"
mkdir "$work/fetch"
cat >"$work/fetch/Cargo.toml" <<'TOML'
[package]
name = "fetch"
version = "0.0.0"
edition = "2021"
[lib]
path = "lib.rs"
[dependencies]
libsqlite3-sys = { version = "=0.30.1", features = ["bundled"] }
TOML
: >"$work/fetch/lib.rs"
cargo fetch -q --manifest-path "$work/fetch/Cargo.toml"
src=$(cargo metadata -q --format-version 1 --filter-platform "$(uname -m)-unknown-linux-gnu" \
    --manifest-path "$work/fetch/Cargo.toml" |
    python3 -c 'import json, sys, os; m = json.load(sys.stdin); print(next(os.path.dirname(p["manifest_path"]) for p in m["packages"] if p["name"] == "libsqlite3-sys"))')/sqlite3
gcc -O2 -g -finstrument-functions -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION \
    -I"$src" -o "$work/sqlite" "$here/sqlite.c" "$src/sqlite3.c" -lm
for r in $(seq "$ROUNDS"); do
    echo "untraced $("$work/sqlite" "$ROWS" 2>/dev/null)" >>"$work/times"
    t=$("$ICHNOS" trace -o "$work/full.data" -- "$work/sqlite" "$ROWS" 2>"$work/full.err")
    echo "ichnos $t" >>"$work/times"
    echo "ring $("$ICHNOS" trace -q --ring 64K -o "$work/ring.data" -- "$work/sqlite" "$ROWS" 2>/dev/null)" >>"$work/times"
    rm -rf "$work/uftrace.data"
    echo "uftrace $(uftrace record -d "$work/uftrace.data" "$work/sqlite" "$ROWS" 2>/dev/null)" >>"$work/times"
done
for r in $(seq "$ROUNDS"); do
    s=$(date +%s.%N); "$ICHNOS" report --trace -i "$work/full.data" >/dev/null; e=$(date +%s.%N)
    echo "report-ichnos $(awk -v s="$s" -v e="$e" 'BEGIN {printf "%.4f", e - s}')" >>"$work/times"
    s=$(date +%s.%N); uftrace report -d "$work/uftrace.data" >/dev/null 2>&1; e=$(date +%s.%N)
    echo "report-uftrace $(awk -v s="$s" -v e="$e" 'BEGIN {printf "%.4f", e - s}')" >>"$work/times"
done
per_call "rows: $ROWS, rounds: $ROUNDS (medians of the program's own time)" ichnos ring uftrace
echo "per-function table: ichnos report --trace $(median report-ichnos) s, uftrace report $(median report-uftrace) s"
echo "ichnos: $(tail -1 "$work/full.err")"
