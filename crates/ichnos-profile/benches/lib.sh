# What the benchmark scripts share, sourced after they set `here` (their
# own directory).

# median: the median of the numbers on standard input, one a line.
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# start_in_scratch: the workspace's root and its release ichnos (or
# $ICHNOS) as `root` and `ichnos`, and a scratch directory as `work`,
# removed on exit and made the current one.
start_in_scratch() {
	root=$(cd "$here/../../.." && pwd)
	ichnos=${ICHNOS:-$root/target/release/ichnos}
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	cd "$work"
}
