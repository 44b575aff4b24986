#pragma once
// Problems from files, so a user can audit tensors dumped from their own model:
//   - HDF5 (.h5, .hdf5): datasets H, W, targets (optional bias), or logits, targets — at the root
//   or
//     in a group /problem (so a golden file is itself a problem file). Storage as in
//     datasets/io/h5.hpp (float32/float64/IEEE float16, bf16 as uint16 with dtype="bf16").
//   - safetensors (.safetensors): tensors named H, W, targets (optional bias), or logits, targets;
//     dtypes F32, F16, BF16, F64 (logits only) and I64/I32/I16/I8/U8 for targets. The header is
//     parsed with nlohmann-json; offsets and sizes are checked against the file.
//   - NumPy: a folder holding H.npy, W.npy, targets.npy (optional bias.npy), or logits.npy and
//     targets.npy. Format 1.0–3.0 headers, little-endian '<f2' '<f4' '<f8' and integer descrs,
//     C order. There is no maintained NumPy-format library in Debian (`apt-cache search cnpy` finds
//     none), so the reader here is a small strict parser of the documented header
//     (numpy.lib.format), which rejects everything else by name.
// Leading dimensions are flattened: H (B, T, D) → (B·T, D), logits (B, T, V) → (B·T, V), targets
// (B, T) → (B·T). H and W must be fp32, fp16 or bf16 (the reference needs exact products); fp64
// is accepted for given logits only.
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/problem.hpp"

namespace xentlab {

/// One stored array: floats as a Tensor in their own dtype, or integers.
struct LoadedArray {
  std::string name;
  std::vector<std::int64_t> shape;
  bool is_integer = false;
  Tensor floats;                   ///< when !is_integer
  std::vector<std::int64_t> ints;  ///< when is_integer
};

/// Reads one .npy file. Throws FormatError naming the file for a bad magic, an unsupported version
/// or descr (big-endian, bf16-as-void, objects, Fortran order), a malformed header or a file whose
/// size does not match its header (truncated).
LoadedArray read_npy(const std::string& path);

/// Reads every tensor of a .safetensors file. Throws FormatError naming the file and the tensor.
std::vector<LoadedArray> read_safetensors(const std::string& path);

struct LoadedProblem {
  Problem problem;
  std::string format;  ///< "hdf5", "safetensors", "npy"
};

/// Loads a problem file (see the file comment), validated with ignore_index. Throws FormatError
/// for unreadable files or missing tensors, InputError for invalid contents (shapes, dtypes,
/// targets: Problem::validate).
LoadedProblem load_problem_file(const std::string& path, std::int64_t ignore_index);

}  // namespace xentlab
