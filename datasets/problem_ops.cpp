#include "datasets/problem_ops.hpp"

#include <fmt/format.h>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

Tensor copy_rows(const Tensor& t, const std::vector<std::int64_t>& rows) {
  const std::int64_t cols = t.dim(1);
  Tensor out(t.dtype(), {static_cast<std::int64_t>(rows.size()), cols}, t.name());
  const auto esz = static_cast<std::size_t>(size_of(t.dtype()));
  const auto* src = static_cast<const std::byte*>(t.data());
  auto* dst = static_cast<std::byte*>(out.data());
  for (std::size_t q = 0; q < rows.size(); ++q)
    std::copy(src + static_cast<std::size_t>(rows[q] * cols) * esz,
              src + static_cast<std::size_t>((rows[q] + 1) * cols) * esz,
              dst + q * static_cast<std::size_t>(cols) * esz);
  return out;
}

Tensor convert(const Tensor& t, DType dtype) {
  Tensor out(dtype, t.shape(), t.name());
  std::vector<double> buf(4096);
  for (std::int64_t first = 0; first < t.numel(); first += 4096) {
    const std::int64_t k = std::min<std::int64_t>(4096, t.numel() - first);
    t.read(first, k, buf.data());
    for (std::int64_t j = 0; j < k; ++j) out.set(first + j, buf[static_cast<std::size_t>(j)]);
  }
  return out;
}

}  // namespace

Problem select_rows(const Problem& p, const std::vector<std::int64_t>& rows,
                    std::int64_t ignore_index) {
  if (rows.empty()) throw InputError("select_rows: no rows selected");
  for (std::size_t q = 0; q < rows.size(); ++q)
    if (rows[q] < 0 || rows[q] >= p.N || (q > 0 && rows[q] <= rows[q - 1]))
      throw InputError(
          fmt::format("select_rows: row list must be sorted, unique and in [0, {}); "
                      "[{}] = {}",
                      p.N, q, rows[q]));
  std::vector<std::int64_t> t;
  t.reserve(rows.size());
  for (std::int64_t i : rows) t.push_back(p.targets[static_cast<std::size_t>(i)]);
  Problem q =
      p.is_linear()
          ? Problem::linear(copy_rows(p.H, rows), p.W, p.bias, std::move(t), ignore_index, p.name)
          : Problem::from_logits(copy_rows(p.logits, rows), std::move(t), ignore_index, p.name);
  q.targets_drawn_by = p.targets_drawn_by;
  return q;
}

Problem with_input_dtype(const Problem& p, DType dtype, std::int64_t ignore_index) {
  const DType from = p.input_dtype();
  if (from == dtype) return p;
  Problem q = p.is_linear()
                  ? Problem::linear(convert(p.H, dtype), convert(p.W, dtype), p.bias, p.targets,
                                    ignore_index, p.name)
                  : Problem::from_logits(convert(p.logits, dtype), p.targets, ignore_index, p.name);
  q.targets_drawn_by = p.targets_drawn_by;
  return q;
}

}  // namespace xentlab
