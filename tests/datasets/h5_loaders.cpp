// The HDF5 wrapper (datasets/io/h5.hpp), atomic outputs (datasets/io/atomic_file.hpp) and the
// problem loaders (datasets/loaders.hpp: HDF5, .npy, safetensors). Expected values are the values
// written: every storage format must give them back bit for bit, and every damaged file a
// FormatError that names the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "datasets/loaders.hpp"
#include "numerics/error.hpp"
#include "tests/support/temp_folder.hpp"
#include "tests/support/unprivileged.hpp"

namespace xentlab {
namespace {
namespace fs = std::filesystem;

class TempDir : public testing::TempFolderTest {
 protected:
  TempDir() : TempFolderTest("h5") {}
};

// Values that exercise every storage format: ±0, subnormals, the extremes, -inf.
Tensor sample_tensor(DType dt) {
  Tensor t(dt, {2, 5}, "T");
  const double vals[] = {0.0,
                         -0.0,
                         1.0,
                         -2.5,
                         min_subnormal(dt),
                         max_finite(dt),
                         -max_finite(dt),
                         1.0 / 3.0,
                         -std::numeric_limits<double>::infinity(),
                         1e-3};
  for (int k = 0; k < 10; ++k) t.set(k, vals[k]);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

using H5Wrapper = TempDir;

TEST_F(H5Wrapper, TensorsRoundTripBitExactInEveryDtype) {
  {
    h5::File f = h5::File::create(path("t.h5"));
    for (DType dt : {DType::fp64, DType::fp32, DType::fp16, DType::bf16})
      f.create_group("g/" + std::string(to_string(dt))).write_tensor("T", sample_tensor(dt));
    f.close();
  }
  const h5::File f = h5::File::open_read(path("t.h5"));
  for (DType dt : {DType::fp64, DType::fp32, DType::fp16, DType::bf16}) {
    const std::string name = "g/" + std::string(to_string(dt)) + "/T";
    ASSERT_TRUE(f.exists(name)) << name;
    const h5::Dataset d = f.open_dataset(name);
    EXPECT_TRUE(same_bits(d.read_tensor(), sample_tensor(dt))) << to_string(dt);
    EXPECT_EQ(d.attr_string("dtype"), to_string(dt));
    const std::vector<double> v = d.read_double();
    const Tensor ref = sample_tensor(dt);
    for (int k = 0; k < 10; ++k) {
      EXPECT_EQ(v[k], ref.get(k)) << to_string(dt) << " element " << k;
      EXPECT_EQ(std::signbit(v[k]), std::signbit(ref.get(k))) << to_string(dt) << " element " << k;
    }
  }
}

TEST_F(H5Wrapper, IntegersAttributesAndExistence) {
  const std::vector<std::int64_t> ints = {-100, 0, 7, std::int64_t{1} << 40};
  {
    h5::File f = h5::File::create(path("a.h5"));
    f.write("ints", ints);
    f.set_attr("name", std::string("golden ✓"));
    f.set_attr("x", 0.1);
    f.set_attr("n", std::int64_t{-3});
    f.set_attr("n", std::int64_t{4});  // replaced, not duplicated
    f.create_group("a/b/c");
    f.close();
  }
  const h5::File f = h5::File::open_read(path("a.h5"));
  EXPECT_EQ(f.open_dataset("ints").read_int64(), ints);
  EXPECT_EQ(f.attr_string("name"), "golden ✓");
  EXPECT_EQ(f.attr_double("x"), 0.1);
  EXPECT_EQ(f.attr_int("n"), 4);
  EXPECT_TRUE(f.exists("a/b/c"));
  EXPECT_FALSE(f.exists("a/b/d"));
  EXPECT_FALSE(f.exists("a/x/y/z"));  // missing intermediate: false, not an error
  EXPECT_FALSE(f.has_attr("missing"));
}

TEST_F(H5Wrapper, ErrorsNameTheFileAndTheObject) {
  {
    h5::File f = h5::File::create(path("e.h5"));
    f.set_attr("s", std::string("text"));
    f.write("ints", std::vector<std::int64_t>{1, 2});
    f.close();
  }
  const h5::File f = h5::File::open_read(path("e.h5"));
  try {
    f.open_dataset("nope");
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("e.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.attr_double("s"), FormatError);  // a string read as a number
  EXPECT_THROW(f.attr_string("missing"), FormatError);
  EXPECT_THROW(f.open_dataset("ints").read_tensor(), FormatError);  // integers are not a tensor
  EXPECT_THROW(f.open_group("ints"), FormatError);
}

TEST_F(H5Wrapper, ForeignTruncatedAndMissingFiles) {
  std::ofstream(path("text.h5")) << "this is not HDF5\n";
  try {
    h5::File::open_read(path("text.h5"));
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("not an HDF5 file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(h5::File::open_read(path("absent.h5")), FormatError);
  {
    h5::File f = h5::File::create(path("full.h5"));
    std::vector<double> big(100000, 1.5);
    f.write("big", big);
    f.close();
  }
  const auto size = fs::file_size(path("full.h5"));
  fs::copy_file(path("full.h5"), path("cut.h5"));
  fs::resize_file(path("cut.h5"), size / 2);
  EXPECT_THROW(
      {
        const h5::File f = h5::File::open_read(path("cut.h5"));
        f.open_dataset("big").read_double();
      },
      FormatError);
}

/// The message of the FormatError that f throws ("" and a test failure when it throws none).
template <class F>
std::string format_error(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no FormatError";
  return "";
}

TEST_F(H5Wrapper, UnreadableAndLockedFilesAreNotCalledForeign) {
  {
    h5::File f = h5::File::create(path("a.h5"));
    f.set_attr("format_version", std::int64_t{1});
    f.close();
  }
  // Locked by a writer (HDF5's own flock: another process has it open for writing).
  {
    const int fd = ::open(path("a.h5").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    const std::string m = format_error([&] { h5::File::open_read(path("a.h5")); });
    EXPECT_EQ(m.find("not an HDF5 file"), std::string::npos) << m;
    EXPECT_NE(m.find("locked by another process"), std::string::npos) << m;
    ::close(fd);
  }
  EXPECT_NO_THROW(h5::File::open_read(path("a.h5")));
  // Unreadable (mode 000), for an ordinary user: "cannot read", with the reason.
  fs::permissions(dir_, fs::perms::all);
  XL_EXPECT_UNPRIVILEGED([&] {
    {
      h5::File f = h5::File::create(path("b.h5"));
      f.close();
    }
    fs::permissions(path("b.h5"), fs::perms::none);
    const std::string m = format_error([&] { h5::File::open_read(path("b.h5")); });
    std::fprintf(stderr, "%s\n", m.c_str());
    return m.find("cannot read " + path("b.h5") + ": Permission denied") != std::string::npos;
  });
}

TEST_F(H5Wrapper, IntegerAttributesMustBeWholeNumbers) {
  h5::File f = h5::File::create(path("v.h5"));
  f.set_attr("half", 1.5);
  f.set_attr("whole", 1.0);
  f.set_attr("int", std::int64_t{-7});
  f.set_attr("inf", std::numeric_limits<double>::infinity());
  const std::string m = format_error([&] { f.attr_int("half"); });  // was read as 1
  EXPECT_NE(m.find("not an integer"), std::string::npos) << m;
  EXPECT_THROW(f.attr_int("inf"), FormatError);
  EXPECT_EQ(f.attr_int("whole"), 1);
  EXPECT_EQ(f.attr_int("int"), -7);
  EXPECT_EQ(f.attr_double("half"), 1.5);
}

using Atomic = TempDir;

TEST_F(Atomic, RefusesToOverwriteWithoutForceAndLeavesNoTemporary) {
  std::ofstream(path("out.h5")) << "precious";
  EXPECT_THROW(AtomicOutput(path("out.h5"), false), InputError);
  {
    AtomicOutput o(path("out.h5"), true);
    std::ofstream(o.temp_path()) << "new";
    o.commit();
  }
  std::ifstream in(path("out.h5"));
  std::string s;
  in >> s;
  EXPECT_EQ(s, "new");
  // An interrupted write: the temporary disappears and the destination is never created.
  try {
    AtomicOutput o(path("fresh.h5"), false);
    std::ofstream(o.temp_path()) << "half";
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fs::exists(path("fresh.h5")));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()),
            1);  // out.h5 only
  EXPECT_THROW(AtomicOutput(path("no/such/dir/x.h5"), false), InputError);
}

// Two spellings of one output, existing or not, are one file; different names are not.
TEST_F(Atomic, SameOutputFileSeesThroughSpellings) {
  EXPECT_TRUE(same_output_file(path("r.h5"), path("./r.h5")));
  EXPECT_TRUE(same_output_file(path("r.h5"), path("sub/../r.h5")));
  EXPECT_FALSE(same_output_file(path("r.h5"), path("r.h5.md")));
  std::ofstream(path("a")) << "x";
  fs::create_hard_link(path("a"), path("b"));
  EXPECT_TRUE(same_output_file(path("a"), path("b")));
}

// A failed write (here: the temporary name is taken by a folder, so HDF5 cannot create it) is an
// OutputError naming the destination the user asked for, not a "bad file" FormatError naming the
// hidden temporary; the destination is untouched.
TEST_F(Atomic, WriteFailuresNameTheDestination) {
  AtomicOutput o(path("res.h5"), false);
  fs::create_directory(o.temp_path());
  const auto where = output_destination(o.temp_path() + ":/runs/000000");
  ASSERT_TRUE(where.has_value());
  EXPECT_EQ(where->location, path("res.h5") + ":/runs/000000");
  EXPECT_FALSE(output_destination(path("other.h5")).has_value());
  try {
    (void)h5::File::create(o.temp_path());
    ADD_FAILURE() << "creating a file over a folder succeeded";
  } catch (const OutputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(path("res.h5") + ": cannot create the file", 0), 0u) << m;
    EXPECT_NE(m.find(fs::path(o.temp_path()).filename().string()), std::string::npos) << m;
  }
  EXPECT_FALSE(fs::exists(path("res.h5")));
  fs::remove(o.temp_path());
}

// ------------------------------------------------------------------------------------- loaders

// A .npy file written by hand from the format's specification (numpy.lib.format, version 1.0).
void write_npy(const std::string& p, const std::string& descr, const std::string& shape,
               const void* data, std::size_t bytes) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::ofstream o(p, std::ios::binary);
  o.write("\x93NUMPY\x01\x00", 8);
  const std::uint16_t n = static_cast<std::uint16_t>(h.size());
  o.write(reinterpret_cast<const char*>(&n), 2);
  o << h;
  o.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

using Loaders = TempDir;

TEST_F(Loaders, NpyFolder) {
  fs::create_directories(path("np"));
  const float H[6] = {1, 2, 3, 4, 5, 6};              // (3, 2)
  const float W[8] = {1, 0, 0, 1, -1, 0, 0.5, 0.25};  // (4, 2)
  const std::int32_t t[3] = {0, 3, -100};
  write_npy(path("np/H.npy"), "<f4", "(3, 2)", H, sizeof H);
  write_npy(path("np/W.npy"), "<f4", "(4, 2)", W, sizeof W);
  write_npy(path("np/targets.npy"), "<i4", "(3,)", t, sizeof t);
  const LoadedProblem lp = load_problem_file(path("np"), -100);
  EXPECT_EQ(lp.format, "npy");
  EXPECT_EQ(lp.problem.N, 3);
  EXPECT_EQ(lp.problem.V, 4);
  EXPECT_EQ(lp.problem.D, 2);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(lp.problem.H.get(k), H[k]);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(lp.problem.W.get(k), W[k]);
  EXPECT_EQ(lp.problem.targets, (std::vector<std::int64_t>{0, 3, -100}));
  // Truncated, big-endian, and Fortran order: each a FormatError naming the file.
  write_npy(path("cut.npy"), "<f4", "(3, 2)", H, sizeof H - 4);
  EXPECT_THROW(read_npy(path("cut.npy")), FormatError);
  write_npy(path("be.npy"), ">f4", "(3, 2)", H, sizeof H);
  EXPECT_THROW(read_npy(path("be.npy")), FormatError);
  std::ofstream(path("junk.npy")) << "junk";
  EXPECT_THROW(read_npy(path("junk.npy")), FormatError);
  // An out-of-range target is an InputError from the problem's validation.
  const std::int32_t bad[3] = {0, 4, 1};
  write_npy(path("np/targets.npy"), "<i4", "(3,)", bad, sizeof bad);
  EXPECT_THROW(load_problem_file(path("np"), -100), InputError);
}

// A .safetensors file written by hand from its specification (8-byte header length, JSON header,
// data; offsets relative to the start of the data).
void write_safetensors(const std::string& p, const std::string& header,
                       const std::vector<char>& data) {
  std::ofstream o(p, std::ios::binary);
  const std::uint64_t n = header.size();
  o.write(reinterpret_cast<const char*>(&n), 8);
  o << header;
  o.write(data.data(), static_cast<std::streamsize>(data.size()));
}

TEST_F(Loaders, Safetensors) {
  // logits (2, 3) bf16 and targets (2,) int64: bf16 bits of 1.0 = 0x3F80, -2.0 = 0xC000, 0.5 =
  // 0x3F00.
  const std::uint16_t z[6] = {0x3F80, 0xC000, 0x3F00, 0x0000, 0x3F80, 0x3F80};
  const std::int64_t t[2] = {2, 0};
  std::vector<char> data(sizeof z + sizeof t);
  std::memcpy(data.data(), z, sizeof z);
  std::memcpy(data.data() + sizeof z, t, sizeof t);
  const std::string hdr =
      R"({"__metadata__":{"by":"test"},"logits":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("targets":{"dtype":"I64","shape":[2],"data_offsets":[12,28]}})";
  write_safetensors(path("p.safetensors"), hdr, data);
  const LoadedProblem lp = load_problem_file(path("p.safetensors"), -100);
  EXPECT_EQ(lp.format, "safetensors");
  EXPECT_FALSE(lp.problem.is_linear());
  EXPECT_EQ(lp.problem.logits.dtype(), DType::bf16);
  const double want[6] = {1.0, -2.0, 0.5, 0.0, 1.0, 1.0};
  for (int k = 0; k < 6; ++k) EXPECT_EQ(lp.problem.logits.get(k), want[k]);
  EXPECT_EQ(lp.problem.targets, (std::vector<std::int64_t>{2, 0}));
  // Offsets past the data (a truncated file) and a malformed header.
  write_safetensors(path("cut.safetensors"), hdr,
                    std::vector<char>(data.begin(), data.begin() + 20));
  EXPECT_THROW(load_problem_file(path("cut.safetensors"), -100), FormatError);
  write_safetensors(path("bad.safetensors"), "{not json", {});
  EXPECT_THROW(load_problem_file(path("bad.safetensors"), -100), FormatError);
  // Missing targets.
  write_safetensors(path("nt.safetensors"),
                    R"({"logits":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})",
                    std::vector<char>(data.begin(), data.begin() + 12));
  EXPECT_THROW(load_problem_file(path("nt.safetensors"), -100), FormatError);
}

TEST_F(Loaders, Hdf5ProblemFile) {
  Tensor H(DType::fp16, {2, 3, 4}, "H"), W(DType::fp16, {5, 4}, "W");  // H (B, T, D) is flattened
  for (int k = 0; k < 24; ++k) H.set(k, 0.25 * (k - 12));
  for (int k = 0; k < 20; ++k) W.set(k, 0.125 * (k % 7));
  {
    h5::File f = h5::File::create(path("p.h5"));
    f.write_tensor("H", H);
    f.write_tensor("W", W);
    f.write("targets", std::vector<std::int64_t>{0, 1, 2, 3, 4, -100});
    f.close();
  }
  const LoadedProblem lp = load_problem_file(path("p.h5"), -100);
  EXPECT_EQ(lp.problem.N, 6);
  EXPECT_EQ(lp.problem.D, 4);
  EXPECT_EQ(lp.problem.H.dtype(), DType::fp16);
  EXPECT_EQ(0, std::memcmp(lp.problem.H.data(), H.data(), H.nbytes()));
  std::ofstream(path("x.h5")) << "x";
  EXPECT_THROW(load_problem_file(path("x.h5"), -100), FormatError);
}

// A file holding logits beside H, W or a bias is two problems (or logits whose bias would be
// dropped): refused naming them, never one of them chosen without a word (the logits were).
TEST_F(Loaders, LogitsBesideHWOrBiasAreRefusedNamingBoth) {
  Tensor H(DType::fp32, {2, 3}, "H"), W(DType::fp32, {4, 3}, "W"), z(DType::fp32, {2, 4}, "logits");
  Tensor b(DType::fp32, {4}, "bias");
  for (const char* extra : {"H", "bias"}) {
    const std::string p = path(std::string("both_") + extra + ".h5");
    {
      h5::File f = h5::File::create(p);
      f.write_tensor("logits", z);
      f.write_tensor(extra, std::string(extra) == "H" ? H : b);
      if (std::string(extra) == "H") f.write_tensor("W", W);
      f.write("targets", std::vector<std::int64_t>{0, 1});
      f.close();
    }
    try {
      (void)load_problem_file(p, -100);
      ADD_FAILURE() << extra << ": loaded";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("logits and " + std::string(extra)), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace xentlab
