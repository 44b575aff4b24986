#pragma once
// Text helpers shared by the command-line layer and the tool libraries.
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace xentlab {

/// The `sep`-separated items of `s`, in order, empty items dropped ("8192x128256x4096", 'x' →
/// 8192, 128256, 4096).
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

/// The comma-separated items of every string of `in`, in order, empty items dropped
/// ("a,b", "c" → a, b, c). Option values such as --recipes take either form.
inline std::vector<std::string> split_commas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in)
    for (auto& item : split(s, ',')) out.push_back(std::move(item));
  return out;
}

}  // namespace xentlab
