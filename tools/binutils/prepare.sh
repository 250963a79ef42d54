#!/usr/bin/env bash
# Prepares a newer binutils than the machine's, from Debian's package
# registry, to build test programs with: trixie's (2.44, whose `as
# --gsframe` writes SFrame v2) or sid's (2.47.50, SFrame v3). The packages
# are unpacked with `dpkg -x` together with the libc and libraries they
# were built against, and run through their own dynamic loader; small
# wrappers in DIR/bin (as, ld, objdump, readelf) do that, so `gcc -B
# DIR/bin/` builds whole programs with them.
#
# Usage: prepare.sh SUITE      (trixie or sid)
# Prints DIR. Kept under ${XDG_CACHE_HOME:-~/.cache}/ichnos/binutils/,
# one directory per suite and version: a later run with the same version
# in the registry downloads nothing. The suite's InRelease is checked with
# gpgv against Debian's archive keyring, the package index against the
# hash InRelease gives, and each package against the index's SHA-256.
# sid moves on: its binutils is whatever sid has that day (2.47.50 on
# 2026-12-02). Where the registry cannot be reached, a suite prepared
# before is used (with a note); with none, it says so and exits 2 (the
# tests that need it then fail: a missing peer is a failure, in CI and
# out of it).
set -euo pipefail
suite=${1:?usage: prepare.sh trixie|sid}
case "$suite" in
trixie) sframe=libsframe1 ;;
sid) sframe=libsframe3 ;;
*)
	echo "prepare.sh: unknown suite $suite (trixie or sid)" >&2
	exit 1
	;;
esac
mirror=${DEBIAN_MIRROR:-https://deb.debian.org/debian}
keyring=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/ichnos/binutils
mkdir -p "$cache"
packages=(binutils-x86-64-linux-gnu libbinutils "$sframe" libctf0 libctf-nobfd0 libjansson4 libc6 libzstd1 zlib1g)

# One preparation at a time (tests run in parallel).
exec 9>"$cache/.lock"
flock 9

fetch() {
	curl -sfL --connect-timeout 20 --max-time 600 --retry 2 -o "$2" "$1"
}

# The newest directory of this suite prepared before, if any.
prepared() {
	ls -1dt "$cache/$suite"-*/ 2>/dev/null | while read -r d; do
		if [ -e "$d/.ok" ]; then
			echo "${d%/}"
			break
		fi
	done
}

index=$cache/Packages-$suite
# Fetches and checks the suite's package index: 0, or 2 if the registry
# cannot be reached, 1 if what it serves does not verify.
refresh_index() {
	fetch "$mirror/dists/$suite/InRelease" "$cache/InRelease-$suite.part" || return 2
	if ! gpgv --keyring "$keyring" --output "$cache/Release-$suite" \
		"$cache/InRelease-$suite.part" 2>/dev/null; then
		echo "prepare.sh: $suite's InRelease does not verify against $keyring" >&2
		return 1
	fi
	local want
	want=$(awk '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 }
		s && $3 == "main/binary-amd64/Packages.xz" { print $1 }' "$cache/Release-$suite")
	fetch "$mirror/dists/$suite/main/binary-amd64/Packages.xz" "$index.xz.part" || return 2
	if [ -z "$want" ] || ! echo "$want  $index.xz.part" | sha256sum -c --quiet - >/dev/null 2>&1; then
		echo "prepare.sh: $suite's Packages.xz does not have the SHA-256 its InRelease gives" >&2
		return 1
	fi
	xz -dc "$index.xz.part" >"$index.part"
	mv "$index.part" "$index"
	rm -f "$index.xz.part" "$cache/InRelease-$suite.part"
}

# The index is fetched again after a day (the registry moves on), or
# when a package it names cannot be downloaded (it moved on sooner).
if [ ! -s "$index" ] || [ -n "$(find "$index" -mmin +1440)" ] || [ -n "${PREPARE_REFRESH:-}" ]; then
	rc=0
	refresh_index || rc=$?
	if [ "$rc" = 1 ]; then
		exit 1
	elif [ "$rc" = 2 ]; then
		if [ -n "$(prepared)" ]; then
			echo "prepare.sh: cannot reach $mirror; using $(prepared), prepared before" >&2
			prepared
			exit 0
		elif [ ! -s "$index" ]; then
			echo "prepare.sh: cannot reach $mirror for $suite's package index" >&2
			exit 2
		fi
		echo "prepare.sh: cannot reach $mirror; using the package index fetched before" >&2
	fi
fi

# Filename, SHA256 and Version of package $1 in the index.
field() {
	awk -v p="$1" -v f="$2" 'BEGIN { RS = ""; FS = "\n" }
		{ name = ""; val = ""
		  for (i = 1; i <= NF; i++) {
			if ($i == "Package: " p) name = p
			if (index($i, f ": ") == 1) val = substr($i, length(f) + 3)
		  }
		  if (name == p) { print val; exit } }' "$index"
}

version=$(field binutils-x86-64-linux-gnu Version)
if [ -z "$version" ]; then
	echo "prepare.sh: no binutils-x86-64-linux-gnu in $suite's index" >&2
	exit 2
fi
dir=$cache/$suite-$version
if [ -e "$dir/.ok" ]; then
	echo "$dir"
	exit 0
fi

work=$(mktemp -d "$cache/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
for p in "${packages[@]}"; do
	file=$(field "$p" Filename)
	sum=$(field "$p" SHA256)
	if [ -z "$file" ] || [ -z "$sum" ]; then
		echo "prepare.sh: no $p in $suite's index" >&2
		exit 2
	fi
	if ! fetch "$mirror/$file" "$work/$p.deb"; then
		if [ -z "${PREPARE_REFRESH:-}" ]; then
			# The index may name a version the registry no longer has.
			rm -rf "$work"
			flock -u 9
			PREPARE_REFRESH=1 exec "$0" "$suite"
		fi
		if [ -n "$(prepared)" ]; then
			echo "prepare.sh: cannot download $mirror/$file; using $(prepared), prepared before" >&2
			prepared
			exit 0
		fi
		echo "prepare.sh: cannot download $mirror/$file" >&2
		exit 2
	fi
	if ! echo "$sum  $work/$p.deb" | sha256sum -c --quiet - >/dev/null 2>&1; then
		echo "prepare.sh: $file does not have the SHA-256 its index gives" >&2
		exit 1
	fi
	dpkg -x "$work/$p.deb" "$work/root"
done

root=$work/root
mkdir -p "$work/bin"
# Each tool through the unpacked loader, with the unpacked libraries
# first. The paths are the final directory's.
final_root=$dir/root
for tool in as ld objdump readelf; do
	cat >"$work/bin/$tool" <<EOF
#!/bin/sh
exec "$final_root/usr/lib64/ld-linux-x86-64.so.2" --library-path "$final_root/usr/lib/x86_64-linux-gnu:$final_root/lib/x86_64-linux-gnu" "$final_root/usr/bin/x86_64-linux-gnu-$tool" "\$@"
EOF
	chmod +x "$work/bin/$tool"
done
# ld.bfd is what gcc's collect2 may ask for by that name.
cp "$work/bin/ld" "$work/bin/ld.bfd"
# Debian's libc6 links usr/lib64/ld-linux-x86-64.so.2 to the loader,
# relatively, so that it holds wherever the tree is.
if [ ! -e "$root/usr/lib64/ld-linux-x86-64.so.2" ]; then
	echo "prepare.sh: $suite's libc6 has no usr/lib64/ld-linux-x86-64.so.2" >&2
	exit 1
fi
mkdir -p "$work/out"
mv "$root" "$work/out/root"
mv "$work/bin" "$work/out/bin"
echo "$version" >"$work/out/version"
rm -rf "$dir"
mv "$work/out" "$dir"
# Marked good only once it runs: a directory that does not is removed,
# never handed out later.
if ! "$dir/bin/as" --version >/dev/null 2>&1 || ! "$dir/bin/objdump" --version >/dev/null 2>&1; then
	rm -rf "$dir"
	echo "prepare.sh: $suite's binutils does not run here" >&2
	exit 1
fi
touch "$dir/.ok"
echo "$dir"
