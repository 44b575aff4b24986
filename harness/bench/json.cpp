// The bench's JSON report (harness/bench/report.hpp bench_json; keys: docs/json.md, "bench").
#include <fmt/format.h>

#include <utility>

#include "harness/bench/report.hpp"
#include "harness/json_report.hpp"

namespace xentlab::bench {
namespace {

using json_report::Json;
using json_report::real;

// A byte count that is −1 where there is none: null then.
Json bytes_or_null(std::int64_t b) {
  return b >= 0 ? Json(b) : Json(nullptr);
}

Json options_json(const BenchOptions& o) {
  Json j;
  j["N"] = o.N;
  j["V"] = o.V;
  j["D"] = o.D;
  Json recipes = Json::array();
  for (const Recipe& r : o.recipes) recipes.push_back(r.name());
  j["recipes"] = std::move(recipes);
  j["strategies"] = o.strategies;
  j["memory_budget_bytes"] = o.memory_budget;
  j["chunk_tokens"] = o.chunk_tokens;
  j["vocab_splits"] = o.vocab_splits;
  j["gemms_alone"] = o.gemms_alone;
  j["repeats"] = o.repeats;
  j["warmup"] = o.warmup;
  j["sample_rows"] = o.sample_rows;
  j["vocab_rows"] = o.vocab_rows;
  j["seed"] = o.seed;
  j["preset"] = o.preset.empty() ? Json(nullptr) : Json(o.preset);
  j["flops"] = real(o.flops());
  return j;
}

Json device_json(const BenchMeta& m) {
  Json j;
  j["gpu"] = m.gpu_name;
  j["driver"] = m.driver.empty() ? Json(nullptr) : Json(m.driver);
  j["cuda_driver_api"] = m.cuda_driver_api;
  j["cuda_runtime"] = m.cuda_runtime;
  j["sm"] = fmt::format("{}.{}", m.sm_major, m.sm_minor);
  j["multiprocessors"] = m.multiprocessors;
  j["sm_clock_mhz"] = m.sm_clock_mhz;
  j["mem_clock_mhz"] = m.mem_clock_mhz;
  j["l2_bytes"] = m.l2_bytes;
  j["memory_bytes"] = m.memory_bytes;
  j["gemm_tflops"] = real(m.gemm_tflops);
  j["gemm_sustained_tflops"] = real(m.gemm_sustained_tflops);
  j["input_copies"] = m.input_copies;
  j["sample_rows"] = m.sample_rows;
  j["vocab_rows"] = m.vocab_rows;
  return j;
}

Json row_json(const BenchRow& row) {
  const bool ok = measured(row.status);
  Json j;
  j["strategy"] = row.strategy;
  j["recipe"] = row.recipe;
  j["status"] = std::string(to_string(row.status));
  j["message"] = row.message;
  if (ok)
    j["time_ms"] = {{"n", row.time.n},           {"median", real(row.time.median)},
                    {"min", real(row.time.min)}, {"max", real(row.time.max)},
                    {"q1", real(row.time.q1)},   {"q3", real(row.time.q3)}};
  else
    j["time_ms"] = nullptr;
  Json times = Json::array();
  for (const double t : row.times_ms) times.push_back(real(t));
  j["times_ms"] = std::move(times);
  j["tflops"] = real(row.tflops);
  j["rel_to_naive"] = real(row.rel_to_naive);
  j["deterministic"] = row.deterministic ? Json(*row.deterministic) : Json(nullptr);
  j["gemms_alone_ms"] = row.gemms_time.n > 0 ? Json{{"n", row.gemms_time.n},
                                                    {"median", real(row.gemms_time.median)},
                                                    {"min", real(row.gemms_time.min)},
                                                    {"max", real(row.gemms_time.max)}}
                                             : Json(nullptr);
  j["rel_to_gemms"] = real(row.rel_to_gemms);
  j["peak_extra_bytes"] = bytes_or_null(row.peak_extra_bytes);
  j["planned_extra_bytes"] = bytes_or_null(row.planned_extra_bytes);
  j["chunk_rows"] = row.chunk_rows;
  j["vocab_splits"] = row.vocab_splits;
  j["io_bytes"] = row.io_bytes;
  j["reduced_loss_full"] = real(row.reduced_loss_full);
  j["errors"] = {{"loss", real(row.err_loss)},
                 {"lse", real(row.err_lse)},
                 {"reduced_loss", real(row.err_reduced_loss)},
                 {"dH", real(row.err_dH)},
                 {"dW_sub", real(row.err_dW_sub)}};
  return j;
}

}  // namespace

json_report::Json bench_json(const BenchReport& r) {
  Json doc = json_report::report_head({"bench", r.options.command_line, r.meta.date_utc});
  doc["options"] = options_json(r.options);
  doc["device"] = device_json(r.meta);
  doc["policy"] = json_report::policy_json(policy_by_name(kJudgePolicy));
  Json rows = Json::array();
  for (const BenchRow& row : r.rows) rows.push_back(row_json(row));
  doc["rows"] = std::move(rows);
  if (!r.options.preset.empty()) {
    const Preset& p = find_preset(r.options.preset);
    Json quoted = Json::array();
    for (const QuotedRow& q : p.quoted)
      quoted.push_back({{"strategy", q.strategy},
                        {"peak_memory", q.peak_memory},
                        {"throughput_vs_naive", q.throughput_vs_naive}});
    doc["quoted"] = {{"source", p.quoted_source}, {"rows", std::move(quoted)}};
  } else {
    doc["quoted"] = nullptr;
  }
  return doc;
}

}  // namespace xentlab::bench
