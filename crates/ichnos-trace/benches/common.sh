# What the function-trace benchmark scripts share; sourced by each after
# it has read its arguments. Needs uftrace, the peer every script runs;
# makes $work, a directory removed at the end, and $here, the scripts'.
# `median NAME` is the median of the values the script recorded as lines
# "NAME VALUE" in $work/times.
command -v uftrace >/dev/null || { echo "uftrace is missing: apt-get install uftrace" >&2; exit 1; }
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { grep "^$1 " "$work/times" | awk '{print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
