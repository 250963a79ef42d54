#!/usr/bin/env bash
# Builds a C++ subject for symbolize.sh: 120 generated translation units
# that use std::map, std::unordered_map, std::sort, std::function and
# iostreams, compiled with g++ -O2 -g (deep inline chains through the
# standard library, large DWARF with types). About 65 MB; 2-3 minutes on
# two cores.
# Usage: crates/ichnos-symbol/benches/cxx-subject.sh OUT_DIR
#        SUBJECT=OUT_DIR/cxx-subject crates/ichnos-symbol/benches/symbolize.sh
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out"
cd "$out"
units=120
for ((i = 0; i < units; i++)); do
	cat >"unit$i.cpp" <<CPP
#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
namespace mod$i {
template <typename K, typename V> struct Table {
	std::map<K, V> rows;
	std::unordered_map<K, std::vector<V>> history;
	void put(const K &k, const V &v) { rows[k] = v; history[k].push_back(v); }
	V get(const K &k) const { auto it = rows.find(k); return it == rows.end() ? V() : it->second; }
	std::vector<K> keys_sorted_by(std::function<bool(const V &, const V &)> less) const {
		std::vector<std::pair<K, V>> v(rows.begin(), rows.end());
		std::sort(v.begin(), v.end(), [&](auto &a, auto &b) { return less(a.second, b.second); });
		std::vector<K> out;
		for (auto &p : v)
			out.push_back(p.first);
		return out;
	}
};
std::string render(const Table<std::string, double> &t) {
	std::ostringstream os;
	for (auto &k : t.keys_sorted_by([](double a, double b) { return a < b; }))
		os << k << '=' << t.get(k) << ';';
	return os.str();
}
long work$i(int n) {
	Table<std::string, double> t;
	Table<int, long> u;
	for (int j = 0; j < n; j++) {
		t.put(std::to_string(j * $((i + 3)) % 97), j * 0.5);
		u.put(j % 13, j);
	}
	long s = render(t).size();
	for (auto k : u.keys_sorted_by([](long a, long b) { return a > b; }))
		s += u.get(k);
	return s;
}
} // namespace mod$i
CPP
done
{
	echo '#include <cstdio>'
	for ((i = 0; i < units; i++)); do echo "namespace mod$i { long work$i(int); }"; done
	echo 'int main(int argc, char **) {'
	echo '	long s = 0;'
	for ((i = 0; i < units; i++)); do echo "	s += mod$i::work$i(argc + $i);"; done
	echo '	std::printf("%ld\n", s);'
	echo '}'
} >main.cpp
printf '%s\n' unit*.cpp main.cpp | xargs -P "$(nproc)" -I{} g++ -O2 -g -c {} -o {}.o
g++ -o cxx-subject unit*.cpp.o main.cpp.o
echo "$out/cxx-subject"
