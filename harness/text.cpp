// Text helpers (see text.hpp): byte sizes as typed and as shown.
#include "harness/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "numerics/error.hpp"

namespace xentlab {

std::int64_t parse_bytes(std::string_view text) {
  // Leading and trailing blanks are ignored, and one space may separate the number from its unit
  // ("10 KB"); a blank anywhere else is an error ("1 2 G" is not 12 GiB).
  const auto first = text.find_first_not_of(" \t\n\r\f\v");
  const auto last = text.find_last_not_of(" \t\n\r\f\v");
  const std::string s(first == std::string_view::npos ? std::string_view()
                                                      : text.substr(first, last - first + 1));
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string num = s.substr(0, i);
  if (i < s.size() && s[i] == ' ') ++i;
  std::string unit = s.substr(i);
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (num.empty() || std::count(num.begin(), num.end(), '.') > 1 || num == ".")
    throw InputError(
        fmt::format("memory size '{}': expected a number of bytes, optionally with a "
                    "unit (B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB, TB)",
                    text));
  double mult = 1.0;
  const std::vector<std::pair<std::string, double>> units = {
      {"", 1.0},       {"b", 1.0},    {"k", 0x1p10},   {"kib", 0x1p10}, {"m", 0x1p20},
      {"mib", 0x1p20}, {"g", 0x1p30}, {"gib", 0x1p30}, {"t", 0x1p40},   {"tib", 0x1p40},
      {"kb", 1e3},     {"mb", 1e6},   {"gb", 1e9},     {"tb", 1e12}};
  bool found = false;
  for (const auto& [u, m] : units)
    if (unit == u) {
      mult = m;
      found = true;
    }
  if (!found)
    throw InputError(fmt::format(
        "memory size '{}': unknown unit '{}' (B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB, "
        "TB){}",
        text, s.substr(i),
        unit.size() > 1 && unit[0] == 'e' &&
                std::all_of(unit.begin() + 1, unit.end(),
                            [](char c) {
                              return std::isdigit(static_cast<unsigned char>(c)) || c == '+' ||
                                     c == '-';
                            })
            ? "; no exponents: write 1e9 bytes as 1GB or 1000000000"
            : ""));
  double value = 0.0;
  try {
    value = std::stod(num);
  } catch (const std::out_of_range&) {  // more digits than a double holds, or a tiny fraction
    throw InputError(fmt::format(
        "memory size '{}' is out of range (a whole number of bytes from 1 to 2^62)", text));
  }
  const double v = value * mult;
  if (!(v < 0x1p62)) throw InputError(fmt::format("memory size '{}' is past 2^62 bytes", text));
  if (value > 0 && v < 1.0)
    throw InputError(
        fmt::format("memory size '{}' is less than one byte (0 means the option's default)", text));
  return static_cast<std::int64_t>(std::floor(v));
}

std::string format_bytes(std::int64_t b) {
  const double x = static_cast<double>(b);
  if (b < 0) return "—";
  if (b < 1024) return fmt::format("{} B", b);
  if (x < 0x1p20) return fmt::format("{:.1f} KiB", x / 0x1p10);
  if (x < 0x1p30) return fmt::format("{:.1f} MiB", x / 0x1p20);
  if (x < 0x1p40) return fmt::format("{:.2f} GiB", x / 0x1p30);
  return fmt::format("{:.2f} TiB", x / 0x1p40);
}

}  // namespace xentlab
