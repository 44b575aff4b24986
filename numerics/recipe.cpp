#include "numerics/recipe.hpp"

#include <fmt/format.h>

#include "numerics/error.hpp"

namespace xentlab {

std::string Recipe::name() const {
  return fmt::format("{}/{}/{}/{}", to_string(input), to_string(logits), to_string(accum),
                     to_string(grad));
}

Recipe parse_recipe(std::string_view s) {
  if (s == "fp32") return Recipe{DType::fp32, DType::fp32, DType::fp32, DType::fp32};
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = s.find('/', start);
    parts.push_back(s.substr(start, slash == std::string_view::npos ? slash : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (parts.size() != 4)
    throw InputError(fmt::format(
        "recipe '{}' must have four dtypes input/logits/accum/grad, e.g. bf16/fp32/fp32/bf16", s));
  try {
    return Recipe{parse_dtype(parts[0]), parse_dtype(parts[1]), parse_dtype(parts[2]),
                  parse_dtype(parts[3])};
  } catch (const InputError& e) {
    throw InputError(fmt::format("recipe '{}': {}", s, e.what()));
  }
}

std::vector<Recipe> default_recipe_grid() {
  std::vector<Recipe> grid;
  for (DType in : {DType::bf16, DType::fp16})
    for (DType lg : {DType::fp32, DType::bf16, DType::fp16})
      for (DType ac : {DType::fp32, DType::bf16, DType::fp16}) grid.push_back({in, lg, ac, in});
  grid.push_back({DType::fp32, DType::fp32, DType::fp32, DType::fp32});
  return grid;
}

}  // namespace xentlab
