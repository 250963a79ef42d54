// The deep-stack workload of deep_stacks.sh and stack_copy_cost.sh: a
// file clang++ compiles in about 3 s, its parser and template
// instantiation going past 32 KiB of stack.
#include <algorithm>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>
int main()
{
	std::map<std::string, std::vector<int>> m;
	for (int i = 0; i < 100; i++)
		m[std::to_string(i)].push_back(i);
	std::regex r("a+b");
	std::cout << std::regex_match("aab", r) << m.size() << "\n";
}
