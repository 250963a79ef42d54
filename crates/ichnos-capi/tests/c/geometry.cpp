/* A C++ program whose functions keep their mangled names in the symbol
 * table and in DWARF (noipa: no inlining, no clones), symbolized by
 * symbolize_options.c with and without demangling and compared with
 * binutils addr2line with and without -C. */
#include <cstdio>
namespace geometry {
struct Vec {
	double x, y;
	double dot(const Vec &o) const;
};
__attribute__((noipa)) double Vec::dot(const Vec &o) const
{
	return x * o.x + y * o.y;
}
template <typename T> __attribute__((noipa)) T twice(T v)
{
	return v + v;
}
__attribute__((noipa)) double norm2(const Vec &v)
{
	return twice(v.dot(v));
}
} // namespace geometry
int main(int argc, char **)
{
	geometry::Vec v{double(argc), 2.0};
	std::printf("%f\n", geometry::norm2(v));
}
