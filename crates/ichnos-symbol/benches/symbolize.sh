#!/usr/bin/env bash
# Whole-process benchmark: symbolize the same 100,000 addresses of one
# subject with ichnos (reading the DWARF; from its symbol index made
# beforehand; and a first run that makes the index), blazesym through its
# library (reading the DWARF, and reading a Gsym file made beforehand, as
# ichnos's index is), llvm-gsymutil on the same Gsym file, the addr2line
# crate's tool, binutils addr2line and llvm-symbolizer, in one run; time
# with hyperfine and peak memory with /usr/bin/time -v. Every tool reads
# the addresses from standard input.
#
# The subject is pinned: the ichnos release binary of commit
# SUBJECT_COMMIT (below; built once in a worktree and kept under
# ~/.cache/ichnos/bench-subject/), so that figures measured on different
# days are of the same file. SUBJECT=FILE measures another file instead
# (e.g. the C++ program cxx-subject.sh builds).
#
# Peers: apt-get install hyperfine binutils llvm (llvm-symbolizer,
#        llvm-gsymutil-14)
#        cargo install addr2line --features bin --root /tmp/a2l
#        (blazesym: benches/blazesym-driver, built here with cargo)
# Usage: crates/ichnos-symbol/benches/symbolize.sh [RUNS]
#        SUBJECT=FILE crates/ichnos-symbol/benches/symbolize.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
runs=${1:-5}
subject_commit=${SUBJECT_COMMIT:-6c59afe}
gimli_a2l=${GIMLI_ADDR2LINE:-/tmp/a2l/bin/addr2line}
gsymutil=${GSYMUTIL:-llvm-gsymutil-14}
for tool in hyperfine addr2line llvm-symbolizer "$gsymutil" "$gimli_a2l"; do
	command -v "$tool" >/dev/null || { echo "missing: $tool (see the header of $0)" >&2; exit 1; }
done
cargo build -q --release --manifest-path crates/ichnos-symbol/benches/blazesym-driver/Cargo.toml
blaze=$PWD/crates/ichnos-symbol/benches/blazesym-driver/target/release/blazesym-driver

cargo build -q --release -p ichnos
work=$(mktemp -d)
subject=$work/ichnos-subject
if [ -n "${SUBJECT:-}" ]; then
	cp "$SUBJECT" "$subject"
	echo "subject: $SUBJECT"
else
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/ichnos/bench-subject
	full=$(git rev-parse "$subject_commit^{commit}")
	pinned=$cache/ichnos-$full
	if [ ! -x "$pinned" ]; then
		mkdir -p "$cache"
		rm -rf "$cache/src"
		git worktree prune
		git worktree add -q --detach "$cache/src" "$full"
		(cd "$cache/src" && cargo build -q --release -p ichnos --target-dir "$cache/target")
		cp "$cache/target/release/ichnos" "$pinned.part"
		mv "$pinned.part" "$pinned"
		git worktree remove --force "$cache/src"
	fi
	cp "$pinned" "$subject"
	echo "subject: the ichnos release binary of commit $full"
fi
ichnos=target/release/ichnos
echo "measured by: ichnos at commit $(git rev-parse HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"

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
echo "$(du -h "$subject" | cut -f1), $count addresses"
ulimit -s unlimited

# The index the indexed run reads, made beforehand (its making is timed
# by the "first run" row, which makes it afresh each time).
"$ichnos" symbolize -q --index --index-dir "$work/index" -e "$subject" </dev/null
# The Gsym file blazesym and llvm-gsymutil read, made beforehand too.
t0=$EPOCHREALTIME
"$gsymutil" --quiet --convert="$subject" --out-file="$work/subject.gsym" >/dev/null
t1=$EPOCHREALTIME
echo "Gsym file: $(( $(stat -c %s "$work/subject.gsym") >> 10 )) KiB, made in $(echo "$t1 - $t0" | bc) s by $gsymutil"
sed "s|\$| $work/subject.gsym|" "$work/addrs" >"$work/gsym-lookups"

cmds=(
	"$ichnos symbolize --no-index -e $subject < $work/addrs"
	"$ichnos symbolize --index-dir $work/index -e $subject < $work/addrs"
	"rm -rf $work/fresh; $ichnos symbolize -q --index --index-dir $work/fresh -e $subject < $work/addrs"
	"$blaze elf $subject < $work/addrs"
	"$blaze gsym $work/subject.gsym < $work/addrs"
	"$gsymutil --addresses-from-stdin < $work/gsym-lookups"
	"$gimli_a2l -f -i -C -e $subject < $work/addrs"
	"addr2line -f -i -C -e $subject < $work/addrs"
	"llvm-symbolizer --obj=$subject --functions=linkage --inlining < $work/addrs"
)
names=(ichnos ichnos-indexed ichnos-first-run blazesym-dwarf blazesym-gsym llvm-gsymutil addr2line-crate binutils-addr2line llvm-symbolizer)
# Through a shell: the commands redirect standard input.
args=()
for i in "${!cmds[@]}"; do
	args+=(-n "${names[$i]}" "${cmds[$i]} > /dev/null")
done
hyperfine --runs "$runs" --warmup 1 --export-json "$work/times.json" "${args[@]}" >/dev/null

echo
printf '%-20s %12s %14s %12s\n' tool "mean s" "addresses/s" "peak RSS MiB"
for i in "${!cmds[@]}"; do
	mean=$(python3 -c "import json;d=json.load(open('$work/times.json'));print(d['results'][$i]['mean'])")
	rss=$(bash -c "/usr/bin/time -v bash -c '${cmds[$i]} > /dev/null' 2>&1 >/dev/null | awk '/Maximum resident/ {print \$6}'")
	python3 -c "print(f'{\"${names[$i]}\":<20} {$mean:12.3f} {${count}/$mean:14,.0f} {$rss/1024:12.1f}')"
done
# Not vacuous: what each tool answered, once. The addr2line-style tools
# print a frame's name as "??" where they know none; llvm-gsymutil prints
# one line per address, with an error where it has no answer.
echo
printf '%-20s %s\n' tool "frames named ?? (addresses: $count)"
for i in "${!cmds[@]}"; do
	case "${names[$i]}" in
	llvm-gsymutil) unknown=$(bash -c "${cmds[$i]}" | grep '^0x' | grep -c -i 'error:\|not found' || true) ;;
	*) unknown=$(bash -c "${cmds[$i]}" | grep -c '^??$' || true) ;;
	esac
	printf '%-20s %s\n' "${names[$i]}" "$unknown"
done
rm -rf "$work"
