#pragma once
// The real model: stories260K (llama2.c legacy checkpoint, datasets/data/stories260K/README.md), a
// trained 5-layer Llama with dim 64 and a 512-token vocabulary whose classifier is tied to its
// token embedding table. Its forward pass here runs in double; the problem it yields has
//   H (N, 64) fp32  — the final (RMS-normalised) hidden states, rounded once to fp32,
//   W (512, 64) fp32 — the embedding table, exactly as stored,
//   targets (N)      — the next token of the model's own text (sampled with a seed, or greedy).
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/problem.hpp"

namespace xentlab {

/// Path of stories260K.bin: $XENTLAB_DATA_DIR/stories260K/stories260K.bin when that variable is
/// set, else the repository's copy, datasets/data/stories260K/stories260K.bin (the folder is
/// compiled in). The file is checked with verify_stories260k. Throws InputError naming the path
/// when there is no file there (an override that names a folder without it is an error, not a
/// reason to fall back).
std::string stories260k_path();

/// Throws InputError naming the file, the expected and the actual SHA-256 (and the file's size)
/// unless the file's digest is the one of datasets/data/stories260K/stories260K.bin.sha256
/// (compiled in): a truncated, damaged or foreign file is refused before it is parsed.
void verify_stories260k(const std::string& path);

/// The checkpoint, held as its float32 arrays.
class Stories260K {
 public:
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab = 0, seq_len = 0;

  /// Reads and checks a llama2.c legacy checkpoint (header of 7 int32, positive vocab_size = tied
  /// classifier, float32 arrays whose element count must match the file size exactly). Throws
  /// FormatError naming the file and the mismatch.
  static Stories260K load(const std::string& path);

  /// (vocab, dim) row-major: the token embedding table = the classifier W.
  const float* embedding() const { return w_.data(); }

  /// Result of running the model over one token sequence (positions 0..T-1).
  struct Forward {
    std::vector<int> tokens;       ///< (T+1): the input tokens, then the last generated one
    std::vector<double> residual;  ///< (T, dim) residual stream before the final RMSNorm
    std::vector<double> hidden;    ///< (T, dim) final hidden states (after the final RMSNorm)
    std::vector<double> logits;    ///< (T, vocab) hidden · Eᵀ in double
  };
  /// Generates T ≤ seq_len positions from BOS (token 1): at each position the next token is the
  /// argmax of the logits (greedy, first index on ties) or drawn from their softmax with a stream
  /// seeded by seed. Everything in double.
  Forward generate(int T, bool greedy, std::uint64_t seed) const;

 private:
  std::vector<float> w_;  // all float32 arrays of the file, in file order
  std::size_t off_[12] = {};
};

/// The embedded real input: N next-token rows of the model's own sampled text (sequences of at
/// most seq_len positions from BOS, sampled with seed; greedy = argmax decoding instead), as a
/// linear fp32 problem named "stories260k". The checkpoint is stories260k_path(), or path when
/// given; either is checked with verify_stories260k. Throws InputError for N < 1 and for a
/// missing, damaged or foreign checkpoint.
Problem make_stories260k(std::int64_t N, std::uint64_t seed, bool greedy = false,
                         const std::string& path = "");

}  // namespace xentlab
