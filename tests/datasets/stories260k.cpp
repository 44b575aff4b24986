// The real model (datasets/data/stories260K): its double forward pass against the check values of
// an independent float64 pass printed in datasets/data/stories260K/README.md ("Check values"), the
// problem it yields against the certified reference, and the loader's refusal of any other file
// (SHA-256 of datasets/data/stories260K/stories260K.bin.sha256).
//
// Tolerance: each README value is printed to 6 decimals (half a unit of the last digit, see
// case_support.hpp) and both passes are float64: they differ by rounding of order n·u·|v| with n
// the longest reduction of the network (seq_len·dim products in attention and the FFN), which we
// carry as the "bound" argument.
#include "datasets/stories260k.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "datasets/io/sha256.hpp"
#include "numerics/dtype.hpp"
#include "numerics/error.hpp"
#include "reference/reference.hpp"
#include "tests/support/case_support.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab {
namespace {

const Stories260K& model() {
  static const Stories260K m = Stories260K::load(stories260k_path());
  return m;
}

// Rounding allowance of a float64 forward pass for a value of magnitude |v| (see the header).
double pass_bound(double v) {
  return static_cast<double>(model().seq_len) * model().dim * unit_roundoff(DType::fp64) *
         std::fabs(v);
}

double row_lse(const double* z, int V) {
  double mx = z[0];
  for (int j = 1; j < V; ++j) mx = std::max(mx, z[j]);
  double s = 0;
  for (int j = 0; j < V; ++j) s += std::exp(z[j] - mx);
  return mx + std::log(s);
}

TEST(Stories260K, HeaderMatchesReadme) {
  const auto& m = model();
  EXPECT_EQ(m.dim, 64);
  EXPECT_EQ(m.hidden_dim, 172);
  EXPECT_EQ(m.n_layers, 5);
  EXPECT_EQ(m.n_heads, 8);
  EXPECT_EQ(m.n_kv_heads, 4);
  EXPECT_EQ(m.vocab, 512);
  EXPECT_EQ(m.seq_len, 512);
}

TEST(Stories260K, PositionZeroCheckValues) {
  const auto f = model().generate(1, true, 0);
  const int D = model().dim, V = model().vocab;
  double ss = 0;
  for (int d = 0; d < D; ++d) ss += f.hidden[d] * f.hidden[d];
  const double rms = std::sqrt(ss / D);
  XL_EXPECT_CASE(rms, pass_bound(rms), "2.137063");
  const char* first4[] = {"-0.901649", "-0.851336", "-0.348796", "1.240730"};
  for (int d = 0; d < 4; ++d) XL_EXPECT_CASE(f.hidden[d], pass_bound(f.hidden[d]), first4[d]);
  int arg = 0;
  for (int j = 1; j < V; ++j)
    if (f.logits[j] > f.logits[arg]) arg = j;
  EXPECT_EQ(arg, 461);
  XL_EXPECT_CASE(f.logits[arg], pass_bound(f.logits[arg]), "9.489286");
  const double lse = row_lse(f.logits.data(), V);
  XL_EXPECT_CASE(lse, pass_bound(lse), "10.744960");
}

TEST(Stories260K, HiddenStatesAreRmsNormalised) {
  // README: the hidden state is RMSNorm(x) = x·g / sqrt(mean(x²) + 1e-5) of the residual stream x
  // with one gain vector g for all positions, so h_d·sqrt(mean(x²) + 1e-5)/x_d is the same at
  // every position.
  const int T = 16, D = model().dim;
  const auto f = model().generate(T, false, 3);
  auto gain = [&](int p, int d) {
    const double* x = f.residual.data() + p * D;
    double ms = 0;
    for (int k = 0; k < D; ++k) ms += x[k] * x[k] / D;
    return f.hidden[p * D + d] * std::sqrt(ms + 1e-5) / x[d];
  };
  for (int p = 1; p < T; ++p)
    for (int d = 0; d < D; ++d)
      EXPECT_NEAR(gain(p, d), gain(0, d), pass_bound(gain(0, d)))
          << "position " << p << " component " << d;
}

const int kGreedy[] = {1,   461, 461, 401, 401, 401, 461, 378, 455, 473, 456,
                       435, 299, 362, 409, 283, 264, 283, 452, 288, 13};

TEST(Stories260K, GreedyTokensAndLosses) {
  const int T = 64, V = model().vocab;
  const auto f = model().generate(T, true, 0);
  const int n_listed = static_cast<int>(sizeof kGreedy / sizeof kGreedy[0]);
  // The README lists 21 tokens "then 431 repeated"; its mean loss over 64 positions (checked
  // below) pins the whole sequence. Our pass gives 431 for positions 21..33 and then other tokens
  // (reported to the data's owner); the listed tokens and the first repeat are checked here.
  for (int p = 0; p < n_listed; ++p) EXPECT_EQ(f.tokens[p], kGreedy[p]) << "greedy token " << p;
  EXPECT_EQ(f.tokens[n_listed], 431);
  EXPECT_EQ(f.tokens[n_listed + 1], 431);
  double mean = 0;
  std::vector<double> loss(T);
  for (int p = 0; p < T; ++p) {
    const double* z = f.logits.data() + static_cast<std::size_t>(p) * V;
    loss[p] = row_lse(z, V) - z[f.tokens[p + 1]];
    mean += loss[p] / T;
  }
  const char* first4[] = {"1.255674", "1.905901", "1.639433", "0.127487"};
  for (int p = 0; p < 4; ++p) XL_EXPECT_CASE(loss[p], pass_bound(loss[p]), first4[p]);
  XL_EXPECT_CASE(mean, pass_bound(mean), "0.874976");
}

TEST(Stories260K, ProblemLogitsAreReproducedByTheReference) {
  // The problem stores H rounded once to fp32 and W exact; the reference's loss on it differs from
  // the double forward pass only through that rounding: |Δz_j| ≤ u32·Σ_d |H_d||W_jd| and
  // |Δloss| ≤ 2·max_j|Δz_j| (shared NUMERICS.md §1), plus the reference's own bound.
  const int T = 64;
  const Problem pb = make_stories260k(T, 0, /*greedy=*/true);
  ASSERT_EQ(pb.N, T);
  ASSERT_EQ(pb.V, 512);
  ASSERT_EQ(pb.D, 64);
  EXPECT_EQ(pb.H.dtype(), DType::fp32);
  const auto f = model().generate(T, true, 0);
  LossSpec spec;
  spec.reduction = Reduction::none;
  ReferenceOptions opt;
  opt.want_dH = opt.want_dW = opt.want_db = false;
  const ReferenceResult r = compute_reference(pb, spec, opt);
  const double u32 = unit_roundoff(DType::fp32);
  for (int p = 0; p < T; ++p) {
    EXPECT_EQ(pb.targets[p], f.tokens[p + 1]);
    double dz = 0;
    for (int j = 0; j < 512; ++j) {
      double s = 0;
      for (int d = 0; d < 64; ++d)
        s += std::fabs(f.hidden[p * 64 + d]) * std::fabs(pb.W.get(j * 64 + d));
      dz = std::max(dz, u32 * s);
    }
    const double* z = f.logits.data() + static_cast<std::size_t>(p) * 512;
    const double lse = row_lse(z, 512);
    EXPECT_NEAR(r.lse[p], lse, dz + r.lse_bound[p] + pass_bound(lse)) << "row " << p;
    EXPECT_NEAR(r.loss[p], lse - z[pb.targets[p]], 2 * dz + r.loss_bound[p] + pass_bound(lse))
        << "row " << p;
  }
}

TEST(Stories260K, SampledTextIsSeededAndLowLoss) {
  const Problem a = make_stories260k(600, 7), b = make_stories260k(600, 7),
                c = make_stories260k(600, 8);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_NE(a.targets, c.targets);
  EXPECT_EQ(0, std::memcmp(a.H.data(), b.H.data(), a.H.nbytes()));
  // Rows 512.. start a second sequence from BOS: row 512 repeats position 0 (hidden state of BOS).
  EXPECT_EQ(0,
            std::memcmp(static_cast<const char*>(a.H.data()) + 512 * 64 * 4, a.H.data(), 64 * 4));
  LossSpec spec;
  ReferenceOptions opt;
  opt.want_dH = opt.want_dW = opt.want_db = false;
  const ReferenceResult r = compute_reference(a, spec, opt);
  // A trained model on its own samples: the mean loss is below that of the uniform
  // distribution, ln V.
  EXPECT_LT(r.reduced_loss + r.reduced_loss_bound, std::log(512.0));
}

TEST(Stories260K, MissingOrDamagedCheckpointIsAFormatError) {
  EXPECT_THROW(Stories260K::load("/nonexistent/stories260K.bin"), FormatError);
  EXPECT_THROW(make_stories260k(0, 1), InputError);
}

// ---- where the checkpoint is found, and the refusal of any other file --------------------------

// Sets (or, with nullopt, removes) an environment variable for one scope; restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The repository's copy (no override), and its bytes.
std::string repository_copy() {
  ScopedEnv none("XENTLAB_DATA_DIR", std::nullopt);
  return stories260k_path();
}
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The message of the InputError that f throws ("" and a failure when it throws none).
template <class F>
std::string input_error(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

void expect_contains(const std::string& msg, const std::string& part) {
  EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

TEST(Stories260K, FoundInTheRepositoryByDefault) {
  const std::string p = std::filesystem::path(repository_copy()).generic_string();
  const std::string tail = "/datasets/data/stories260K/stories260K.bin";
  EXPECT_TRUE(p.size() > tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0)
      << p;
  EXPECT_NO_THROW(verify_stories260k(p));
}

TEST(Stories260K, TruncatedCopyIsRefused) {
  const std::string real = repository_copy();
  const std::string expected = sha256_file_hex(real);
  const std::string bytes = file_bytes(real);
  testing::TempFolder t("stories260k");
  std::filesystem::create_directories(t.dir / "stories260K");
  const std::string copy = t.path("stories260K/stories260K.bin");
  const std::string half = bytes.substr(0, bytes.size() / 2);
  std::ofstream(copy, std::ios::binary) << half;
  ScopedEnv env("XENTLAB_DATA_DIR", t.dir.string());
  const std::string msg = input_error([] { stories260k_path(); });
  expect_contains(msg, copy);
  expect_contains(msg, "SHA-256");
  expect_contains(msg, "expected " + expected);
  expect_contains(msg, "got " + sha256_hex(half.data(), half.size()));
  expect_contains(msg, std::to_string(half.size()) + " bytes");
  // Every user of the default path goes through the check (the catalog, the audit's problem set).
  expect_contains(input_error([] { make_stories260k(4, 1); }), "SHA-256 mismatch");
}

TEST(Stories260K, ForeignFileOfTheSameSizeIsRefused) {
  std::string bytes = file_bytes(repository_copy());
  bytes[bytes.size() / 2] ^= 1;  // one bit of one weight
  testing::TempFolder t("stories260k");
  const std::string copy = t.path("stories260K.bin");
  std::ofstream(copy, std::ios::binary) << bytes;
  const std::string msg = input_error([&] { verify_stories260k(copy); });
  expect_contains(msg, copy);
  expect_contains(msg, "got " + sha256_hex(bytes.data(), bytes.size()));
  // An explicit path is checked as well.
  expect_contains(input_error([&] { make_stories260k(4, 1, false, copy); }), copy);
}

TEST(Stories260K, OverrideWithoutTheFileIsAnError) {
  testing::TempFolder t("stories260k");
  ScopedEnv env("XENTLAB_DATA_DIR", t.dir.string());
  const std::string msg = input_error([] { stories260k_path(); });
  expect_contains(msg, t.path("stories260K/stories260K.bin"));
  expect_contains(msg, "XENTLAB_DATA_DIR");
}

TEST(Sha256, KnownAnswers) {
  // FIPS 180-4 examples (NIST CSRC "SHA-256" example values) and the one-million-'a' message.
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two.data(), two.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  const std::string digest = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(sha256_hex(million.data(), million.size()), digest);
  // The same through a file (read in blocks that do not align with the message's).
  testing::TempFolder t("sha256");
  std::ofstream(t.path("a"), std::ios::binary) << million;
  EXPECT_EQ(sha256_file_hex(t.path("a")), digest);
  EXPECT_THROW(sha256_file_hex(t.path("missing")), InputError);
}

}  // namespace
}  // namespace xentlab
