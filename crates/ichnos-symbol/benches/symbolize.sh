#!/usr/bin/env bash
# Whole-process benchmark: symbolize the same 100,000 addresses of the
# ichnos release binary (debug = 1: line tables and inlined frames) with
# ichnos (reading the DWARF; from its symbol index made beforehand; and a
# first run that makes the index), blazesym's blazecli, the addr2line
# crate's tool, binutils addr2line and llvm-symbolizer, in one run; time
# with hyperfine and peak memory with /usr/bin/time -v.
#
# Peers: apt-get install hyperfine binutils llvm
#        cargo install blazecli --root /tmp/blaze
#        cargo install addr2line --features bin --root /tmp/a2l
# Usage: crates/ichnos-symbol/benches/symbolize.sh [RUNS]
#        SUBJECT=FILE crates/ichnos-symbol/benches/symbolize.sh [RUNS]
#        (another subject, e.g. the C++ program cxx-subject.sh builds)
set -euo pipefail
cd "$(dirname "$0")/../../.."
runs=${1:-5}
blaze=${BLAZECLI:-/tmp/blaze/bin/blazecli}
gimli_a2l=${GIMLI_ADDR2LINE:-/tmp/a2l/bin/addr2line}
for tool in hyperfine addr2line llvm-symbolizer "$blaze" "$gimli_a2l"; do
	command -v "$tool" >/dev/null || { echo "missing: $tool (see the header of $0)" >&2; exit 1; }
done

cargo build -q --release -p ichnos
subject=$(mktemp -d)/ichnos-subject
cp "${SUBJECT:-target/release/ichnos}" "$subject"
work=$(dirname "$subject")
ichnos=target/release/ichnos

# 100,000 addresses spread over every function: function start plus
# offsets stepping through its body, in address order.
nm -S --defined-only "$subject" | awk '($3=="t"||$3=="T"||$3=="W") && $2 != "" {print $1, $2}' |
	python3 -c '
import sys
funcs = [(int(a, 16), int(s, 16)) for a, s in (l.split() for l in sys.stdin) if int(s, 16) > 0]
total = sum(s for _, s in funcs)
want = 100_000
out = []
for a, s in funcs:
    n = max(1, round(want * s / total))
    out.extend(a + (s * k) // n for k in range(n))
out = sorted(set(out))[:want]
print("\n".join(hex(x) for x in out))
' >"$work/addrs"
count=$(wc -l <"$work/addrs")
echo "subject: $subject ($(du -h "$subject" | cut -f1)), $count addresses"
ulimit -s unlimited

# The index the indexed run reads, made beforehand (its making is timed
# by the "first run" row, which makes it afresh each time).
"$ichnos" symbolize -q --index --index-dir "$work/index" -e "$subject" </dev/null

cmds=(
	"$ichnos symbolize --no-index -e $subject < $work/addrs"
	"$ichnos symbolize --index-dir $work/index -e $subject < $work/addrs"
	"rm -rf $work/fresh; $ichnos symbolize -q --index --index-dir $work/fresh -e $subject < $work/addrs"
	"$blaze symbolize elf --path $subject \$(cat $work/addrs)"
	"$gimli_a2l -f -i -C -e $subject < $work/addrs"
	"addr2line -f -i -C -e $subject < $work/addrs"
	"llvm-symbolizer --obj=$subject --functions=linkage --inlining < $work/addrs"
)
names=(ichnos ichnos-indexed ichnos-first-run blazesym addr2line-crate binutils-addr2line llvm-symbolizer)
# Through a shell: the commands redirect standard input.
hyperfine --runs "$runs" --warmup 1 --export-json "$work/times.json" \
	-n "${names[0]}" "${cmds[0]} > /dev/null" \
	-n "${names[1]}" "${cmds[1]} > /dev/null" \
	-n "${names[2]}" "${cmds[2]} > /dev/null" \
	-n "${names[3]}" "${cmds[3]} > /dev/null" \
	-n "${names[4]}" "${cmds[4]} > /dev/null" \
	-n "${names[5]}" "${cmds[5]} > /dev/null" \
	-n "${names[6]}" "${cmds[6]} > /dev/null" >/dev/null

echo
printf '%-20s %12s %14s %12s\n' tool "mean s" "addresses/s" "peak RSS MiB"
for i in "${!cmds[@]}"; do
	mean=$(python3 -c "import json;d=json.load(open('$work/times.json'));print(d['results'][$i]['mean'])")
	rss=$(bash -c "/usr/bin/time -v bash -c '${cmds[$i]} > /dev/null' 2>&1 >/dev/null | awk '/Maximum resident/ {print \$6}'")
	python3 -c "print(f'{\"${names[$i]}\":<20} {$mean:12.3f} {${count}/$mean:14,.0f} {$rss/1024:12.1f}')"
done
rm -rf "$work"
