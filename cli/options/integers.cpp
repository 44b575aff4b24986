// Plain decimal integers, and numbers that are not empty, on the command line (see commands.hpp:
// require_decimal_integers).
// CLI11 2.1 converts integers with strtoll/strtoull in base 0: "010" is read as 8 (octal),
// "0x10" as 16, "-1" as 2^64 − 1 for an unsigned option, and a value past the type's range is
// clamped without a word. This check runs on the text before that conversion.
#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cli/commands.hpp"

namespace xentlab::cli {
namespace {

/// Empty when `s` is a plain decimal integer in range; else why not. `is_unsigned`: no sign.
std::string decimal_problem(const std::string& s, bool is_unsigned) {
  std::size_t i = 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) i = 1;
  if (i == s.size()) return "no digits";
  for (std::size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return "write digits only, in base 10";
  const std::string digits = s.substr(i);
  if (digits.size() > 1 && digits[0] == '0')
    return "a leading zero would make it octal; write it without";
  if (negative && is_unsigned && digits != "0") return "it must not be negative";
  // Range: int64 for signed options, uint64 for unsigned ones.
  const std::string limit = is_unsigned
                                ? "18446744073709551615"
                                : (negative ? "9223372036854775808" : "9223372036854775807");
  if (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit))
    return std::string("it is past the largest ") + (is_unsigned ? "unsigned " : "") +
           "64-bit integer";
  return {};
}

void add_checks(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type.rfind("FLOAT", 0) == 0) {
      // CLI11 converts an empty value to 0 without a word: refuse it, as the integers refuse it.
      o->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return s.find_first_not_of(" \t") == std::string::npos
                       ? "'" + s + "' is not a number: give a value, or leave the option out"
                       : std::string();
          },
          "", "nonempty"));
      continue;
    }
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    if (!is_unsigned && type.rfind("INT", 0) != 0) continue;
    o->check(CLI::Validator(
        [is_unsigned](std::string& s) -> std::string {
          const std::string why = decimal_problem(s, is_unsigned);
          return why.empty() ? std::string() : "'" + s + "' is not a plain decimal integer: " + why;
        },
        "", "decimal"));
  }
  for (CLI::App* sub : app.get_subcommands({})) add_checks(*sub);
}

}  // namespace

namespace {
CLI::Validator sign_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& v) -> std::string {
        char* end = nullptr;
        const long double x = std::strtold(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0') return "";  // not a number: the conversion says so
        if (allow_zero ? x >= 0 : x > 0) return "";
        return std::string(allow_zero ? "must be ≥ 0" : "must be > 0") + ", got " + v;
      },
      // ASCII: CLI11 pads the help's first column by bytes, and "≥" takes three.
      allow_zero ? ">= 0" : "> 0");
}
}  // namespace

CLI::Validator in_range(double lo, double hi) {
  const std::string range = fmt::format("{:g} to {:g}", lo, hi);
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        const long double x = std::strtold(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0') return "";  // not a number: the conversion says so
        if (x >= lo && x <= hi) return "";
        return fmt::format("must be between {:g} and {:g}, got {}", lo, hi, v);
      },
      range);
}

const CLI::Validator& non_negative() {
  static const CLI::Validator v = sign_check(true);
  return v;
}

const CLI::Validator& positive() {
  static const CLI::Validator v = sign_check(false);
  return v;
}

void require_decimal_integers(CLI::App& app) {
  add_checks(app);
}

void require_distinct_option_names(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands({})) {
    for (const CLI::Option* p : sub->get_options()) {
      if (!p->get_positional()) continue;
      const std::string name = p->get_name(true);  // the positional name
      for (const CLI::Option* o : sub->get_options())
        for (const std::string& l : o->get_lnames())
          if (o != p && l == name)
            throw std::logic_error(fmt::format(
                "xentlab {}: the positional argument '{}' has the name of the option --{} "
                "(refused by CLI11 2.2 and later): rename the positional",
                sub->get_name(), name, l));
    }
    require_distinct_option_names(*sub);
  }
}

}  // namespace xentlab::cli
