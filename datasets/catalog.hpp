#pragma once
// The catalog of named problem sources (`xentlab datasets` lists it): one explicit list, built by
// dataset_catalog(), each entry with its name, the regime it stands for, its defaults (N, V, D,
// dtype, sigma, loss spec, extra parameters) and the function that makes it. Everything is seeded;
// the same name, parameters and seed give the same bits.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/generators.hpp"
#include "datasets/problem.hpp"
#include "numerics/loss_spec.hpp"

namespace xentlab {

/// What a caller may override; unset fields take the entry's defaults.
struct DatasetParams {
  std::optional<std::int64_t> N, V, D;
  std::optional<DType> dtype;
  std::optional<double> sigma;
  std::uint64_t seed = 1;
  std::map<std::string, double> extra;  ///< entry-specific (e.g. offset, fraction); unknown → error
  /// Hears (rows done, N) while a slow generator runs (calibrated targets or confident rows of a
  /// linear head).
  GenerationProgress progress;
  /// Draws linear heads' calibrated targets instead of the CPU BLAS (the GPU); null = the CPU.
  std::shared_ptr<const TargetEngine> targets;
};

/// Parameters after defaults are applied.
struct ResolvedParams {
  std::int64_t N = 0, V = 0, D = 0;  ///< D = 0 for given-logits entries
  DType dtype = DType::bf16;
  double sigma = 0;
  std::uint64_t seed = 1;
  LossSpec spec;
  std::map<std::string, double> extra;
  GenerationProgress progress;                  ///< DatasetParams::progress
  std::shared_ptr<const TargetEngine> targets;  ///< DatasetParams::targets
  /// extra value by key (every key an entry uses is in its defaults).
  double get(const std::string& key) const;
};

struct DatasetEntry {
  std::string name;
  std::string regime;  ///< one or two sentences: what it stands for
  ResolvedParams defaults;
  bool fixed_shape = false;  ///< V, D, dtype cannot be overridden (the real model)
  std::function<Problem(const ResolvedParams&)> make;
};

/// Every named source, in the order `xentlab datasets` prints them.
const std::vector<DatasetEntry>& dataset_catalog();
/// The entry called name; throws InputError listing the names when there is none.
const DatasetEntry& find_dataset(const std::string& name);

/// A problem with what produced it (for provenance).
struct DatasetInstance {
  Problem problem;
  LossSpec spec;          ///< the entry's default spec (softcap 30 for gemma2-2b, …)
  std::string source;     ///< catalog name, or the file path
  std::string generator;  ///< "catalog:NAME" or "file:FORMAT"
  std::string regime;
  ResolvedParams params;
};

/// Makes the named problem. Throws InputError for an unknown name, an unknown extra key, or an
/// override the entry does not accept.
DatasetInstance make_dataset(const std::string& name, const DatasetParams& params);

/// Before a problem is generated: throws InputError (exit status 2, as the reference's memory
/// budget does) when its inputs alone — H (N, D) and W (V, D) in `dtype`, or the logits (N, V) when
/// D = 0, and N targets — take more bytes than this machine's physical memory, naming the sizes
/// (-N 3000000000 would otherwise end in an allocation failure deep inside the generator).
/// make_dataset calls it; the audit calls it for its embedded problems.
void check_problem_fits(const std::string& name, std::int64_t N, std::int64_t V, std::int64_t D,
                        DType dtype);

/// A catalog name, or else a file (HDF5, .safetensors, a folder of .npy: datasets/loaders.hpp),
/// loaded with the given ignore_index. Throws InputError when it is neither: "no such file" when
/// the name looks like a path (holds a '/' or has a file extension), else "unknown dataset".
DatasetInstance load_dataset(const std::string& name_or_path, const DatasetParams& params,
                             std::int64_t ignore_index = -100);

}  // namespace xentlab
