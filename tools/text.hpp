#pragma once
// Text helpers shared by the command-line layer and the tool libraries.
#include <sstream>
#include <string>
#include <vector>

namespace xentlab {

/// The comma-separated items of every string of `in`, in order, empty items dropped
/// ("a,b", "c" → a, b, c). Option values such as --recipes take either form.
inline std::vector<std::string> split_commas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in) {
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace xentlab
