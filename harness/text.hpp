#pragma once
// Text helpers shared by the command-line layer and the tool libraries: split lists, byte sizes
// (harness/text.cpp).
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
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

/// Bytes from "4294967296", "4GiB", "512MiB", "1.5G", "2GB": suffixes K/M/G/T and KiB/MiB/GiB/TiB
/// are powers of 1024, KB/MB/GB/TB powers of 1000, B or none bytes; case-insensitive; fractions are
/// rounded down to whole bytes. Blanks only around the text and as one space before the unit
/// ("10 KB"). InputError for anything else, negative values, more than 2^62, or a positive size
/// below one byte (0 alone means "each strategy's default").
std::int64_t parse_bytes(std::string_view text);
/// "1.99 GiB", "32.0 MiB", "512 B".
std::string format_bytes(std::int64_t bytes);

}  // namespace xentlab
