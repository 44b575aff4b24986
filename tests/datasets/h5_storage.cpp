// How datasets are stored (datasets/io/h5.hpp): every layout and standard filter that h5py (or
// h5repack) writes is read with identical values — chunked, gzip, shuffle, fletcher32, compact —
// a filter the library lacks is refused by name, truncated and partly written files are refused,
// compressed writing round-trips, and a dataset's sha256 digest is checked on every read.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <utility>

#include "datasets/io/h5.hpp"
#include "numerics/error.hpp"
#include "tests/support/h5_damage.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab {
namespace {
namespace fs = std::filesystem;

class H5Storage : public testing::TempFolderTest {
 protected:
  H5Storage() : TempFolderTest("h5storage") {}
};

// The message of the FormatError that f throws ("" and a test failure when it throws none).
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

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Seeded values with a spread of exponents and signs (gzip finds little to squeeze out of them).
std::vector<double> values(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z;
  std::vector<double> v(n);
  for (auto& x : v) x = z(rng) * std::ldexp(1.0, static_cast<int>(rng() % 20) - 10);
  return v;
}

// Writes a dataset with the HDF5 C API as h5py does for create_dataset(name, data=…, chunks=…,
// compression="gzip", shuffle=…, fletcher32=…): file type ftype, memory type mtype.
void write_c(hid_t file, const char* name, hid_t ftype, hid_t mtype, const void* data,
             const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk, bool gzip,
             bool shuffle, bool fletcher32, H5D_layout_t layout = H5D_CHUNKED) {
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (layout == H5D_CHUNKED) {
    ASSERT_GE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), 0);
    if (fletcher32) {
      ASSERT_GE(H5Pset_fletcher32(dcpl), 0);
    }
    if (shuffle) {
      ASSERT_GE(H5Pset_shuffle(dcpl), 0);
    }
    if (gzip) {
      ASSERT_GE(H5Pset_deflate(dcpl, 6), 0);
    }
  } else {
    ASSERT_GE(H5Pset_layout(dcpl, layout), 0);
  }
  const hid_t d = H5Dcreate2(file, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0) << name;
  ASSERT_GE(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0) << name;
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
}

TEST_F(H5Storage, EveryLayoutAndStandardFilterOfH5pyReadsIdenticalValues) {
  // dH-like (64, 64) float64 — the shape whose gzip file was refused as "truncated" — and shapes
  // whose chunks do not divide them (edge chunks), in float64, float32, int64 and bf16 bits.
  const std::vector<double> dH = values(64 * 64, 1), odd = values(37 * 23, 2);
  std::vector<float> f32(odd.begin(), odd.end());
  std::vector<std::int64_t> ints(101);
  for (std::size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<std::int64_t>(i * i) - 500;
  std::vector<std::uint16_t> bf16(odd.size());
  for (std::size_t i = 0; i < odd.size(); ++i) {
    float x = f32[i];
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    bf16[i] = static_cast<std::uint16_t>(b >> 16);
  }
  struct Way {
    const char* tag;
    bool gzip, shuffle, fletcher32;
    H5D_layout_t layout;
  };
  const Way ways[] = {{"gzip", true, false, false, H5D_CHUNKED},
                      {"gzip_shuffle", true, true, false, H5D_CHUNKED},
                      {"gzip_shuffle_fletcher32", true, true, true, H5D_CHUNKED},
                      {"fletcher32", false, false, true, H5D_CHUNKED},
                      {"chunked", false, false, false, H5D_CHUNKED},
                      {"compact", false, false, false, H5D_COMPACT}};
  for (const Way& w : ways) {
    const std::string p = path(std::string(w.tag) + ".h5");
    {
      const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
      // Compact data live in the object header (64 KiB at most): the small datasets only.
      if (w.layout != H5D_COMPACT)
        write_c(f, "dH", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dH.data(), {64, 64}, {16, 64}, w.gzip,
                w.shuffle, w.fletcher32, w.layout);
      write_c(f, "f32", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, f32.data(), {37, 23}, {8, 5}, w.gzip,
              w.shuffle, w.fletcher32, w.layout);
      write_c(f, "ints", H5T_STD_I64LE, H5T_NATIVE_INT64, ints.data(), {101}, {10}, w.gzip,
              w.shuffle, w.fletcher32, w.layout);
      write_c(f, "bf16", H5T_STD_U16LE, H5T_NATIVE_UINT16, bf16.data(), {37, 23}, {37, 7}, w.gzip,
              w.shuffle, w.fletcher32, w.layout);
      H5Fclose(f);
    }
    const h5::File f = h5::File::open_read(p);
    EXPECT_FALSE(f.declares_checksums()) << w.tag;  // a foreign file: nothing to check
    if (w.layout != H5D_COMPACT) {
      const h5::Dataset d = f.open_dataset("dH");
      EXPECT_EQ(d.read_double(), dH) << w.tag;
      const h5::DatasetInfo inf = d.info();
      EXPECT_EQ(inf.shape, (std::vector<std::int64_t>{64, 64}));
      std::vector<std::string> want;
      if (w.fletcher32) want.push_back("fletcher32");
      if (w.shuffle) want.push_back("shuffle");
      if (w.gzip) want.push_back("deflate");
      EXPECT_EQ(inf.filters, want) << w.tag;
      if (w.gzip && w.shuffle) {
        EXPECT_LT(inf.stored_bytes, 64u * 64u * 8u) << w.tag;  // the case that was refused
      }
    }
    const Tensor t = f.open_dataset("f32").read_tensor();
    ASSERT_EQ(t.dtype(), DType::fp32);
    EXPECT_EQ(0, std::memcmp(t.data(), f32.data(), f32.size() * 4)) << w.tag;
    EXPECT_EQ(f.open_dataset("ints").read_int64(), ints) << w.tag;
    const std::vector<double> as_double = f.open_dataset("f32").read_double();
    for (std::size_t i = 0; i < f32.size(); ++i)
      ASSERT_EQ(as_double[i], static_cast<double>(f32[i])) << w.tag << " element " << i;
    const std::vector<double> bits = f.open_dataset("bf16").read_double();  // uint16 as numbers
    for (std::size_t i = 0; i < bf16.size(); ++i)
      ASSERT_EQ(bits[i], static_cast<double>(bf16[i])) << w.tag << " element " << i;
  }
}

// bf16 bit patterns written as signed 16-bit integers (PyTorch's `t.view(torch.int16).numpy()`:
// torch had no uint16) or big-endian ones, with dtype="bf16", are the same bits: every negative
// value (sign bit set) is a negative int16, which a conversion to uint16 clamped to 0 — a
// candidate's negative gradients read as +0, a problem file's H and W half zeroed.
TEST_F(H5Storage, Bf16BitsStoredAsSignedOrBigEndianIntegersReadAsTheSameBits) {
  const std::vector<std::uint16_t> bits = {0x0000, 0x8000, 0x3F80, 0xBF80, 0xC000,
                                           0x0001, 0x8001, 0x7F7F, 0xFF7F, 0xFF80};
  const std::string p = path("bf16_ints.h5");
  {
    const hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t n = bits.size();
    for (const auto& [name, ftype] : {std::pair<const char*, hid_t>{"u16le", H5T_STD_U16LE},
                                      {"i16le", H5T_STD_I16LE},
                                      {"i16be", H5T_STD_I16BE},
                                      {"u16be", H5T_STD_U16BE}}) {
      // Written from the same bytes as the file type's own sign: the stored bits are `bits`.
      const hid_t mtype = H5Tget_sign(ftype) == H5T_SGN_2 ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
      write_c(f, name, ftype, mtype, bits.data(), {n}, {n}, false, false, false, H5D_CONTIGUOUS);
    }
    H5Fclose(f);
    h5::File rw = h5::File::open_rw(p);
    for (const char* name : {"u16le", "i16le", "i16be", "u16be"})
      rw.open_dataset(name).set_attr("dtype", "bf16");
    rw.close();
  }
  const h5::File f = h5::File::open_read(p);
  for (const char* name : {"u16le", "i16le", "i16be", "u16be"}) {
    const h5::Dataset d = f.open_dataset(name);
    const Tensor t = d.read_tensor();
    ASSERT_EQ(t.dtype(), DType::bf16) << name;
    ASSERT_EQ(t.numel(), static_cast<std::int64_t>(bits.size())) << name;
    EXPECT_EQ(0, std::memcmp(t.data(), bits.data(), bits.size() * 2)) << name;
    const std::vector<double> v = d.read_double();
    EXPECT_EQ(v[3], -1.0) << name;                                      // 0xBF80
    EXPECT_EQ(v[4], -2.0) << name;                                      // 0xC000
    EXPECT_TRUE(std::signbit(v[1]) && v[1] == 0) << name;               // 0x8000 = −0
    EXPECT_EQ(v[9], -std::numeric_limits<double>::infinity()) << name;  // 0xFF80
  }
}

TEST_F(H5Storage, AFilterTheLibraryLacksIsNamedNotCalledDamaged) {
  // h5py's lzf (filter 32000) is registered inside h5py only; a file using it names the filter.
  // Written here as an optional filter this library does not have (HDF5 stores it in the
  // pipeline and skips it for each chunk).
  const std::vector<double> v = values(100, 3);
  {
    const hid_t f = H5Fcreate(path("lzf.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[1] = {100}, chunk[1] = {25};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    ASSERT_GE(H5Pset_filter(dcpl, 32000, H5Z_FLAG_OPTIONAL, 0, nullptr), 0);
    const hid_t d = H5Dcreate2(f, "dH", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(d, 0);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  const h5::File f = h5::File::open_read(path("lzf.h5"));
  const std::string e = format_error([&] { f.open_dataset("dH").read_double(); });
  EXPECT_TRUE(has(e, "lzf.h5:/dH")) << e;
  EXPECT_TRUE(has(e, "'lzf'")) << e;
  EXPECT_TRUE(has(e, "filter not available")) << e;
  EXPECT_FALSE(has(e, "truncated")) << e;
}

TEST_F(H5Storage, TruncatedAndPartlyWrittenChunkedFilesAreRefused) {
  const std::vector<double> v = values(1 << 16, 4);
  {
    const hid_t f = H5Fcreate(path("gz.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    write_c(f, "dH", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data(), {256, 256}, {32, 256}, true, true,
            false);
    H5Fclose(f);
  }
  // Cut anywhere in the middle: the file ends before HDF5's recorded end of its data.
  for (const double keep : {0.25, 0.5, 0.9}) {
    fs::copy_file(path("gz.h5"), path("cut.h5"), fs::copy_options::overwrite_existing);
    fs::resize_file(path("cut.h5"), static_cast<std::uintmax_t>(
                                        keep * static_cast<double>(fs::file_size(path("gz.h5")))));
    const std::string e = format_error([&] {
      const h5::File f = h5::File::open_read(path("cut.h5"));
      f.open_dataset("dH").read_double();
    });
    EXPECT_TRUE(has(e, "cut.h5")) << e;
    EXPECT_TRUE(has(e, "truncated")) << e;
  }
  // A chunked dataset with half of its chunks never written (a writer stopped midway): the rest
  // would read as the fill value (zeros), so it is refused, naming the dataset.
  {
    const hid_t f = H5Fcreate(path("half.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[1] = {100}, chunk[1] = {10}, start[1] = {0}, count[1] = {50};
    const hid_t space = H5Screate_simple(1, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    H5Pset_deflate(dcpl, 6);
    const hid_t d = H5Dcreate2(f, "loss", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const hid_t mem = H5Screate_simple(1, count, nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, v.data()), 0);
    H5Sclose(mem);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  const h5::File f = h5::File::open_read(path("half.h5"));
  const std::string e = format_error([&] { f.open_dataset("loss").read_double(); });
  EXPECT_TRUE(has(e, "half.h5:/loss")) << e;
  EXPECT_TRUE(has(e, "stores 5 of its 10 chunks")) << e;
  EXPECT_TRUE(has(e, "partly written")) << e;
}

TEST_F(H5Storage, CompressedWritesRoundTripSmallerWithDigests) {
  // Compressible data (few distinct values, as targets or masks are) in every dtype, and a
  // tensor larger than one chunk (1 MiB) so that it spans several.
  std::vector<double> big(300000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<double>(i % 7) * 0.25;
  std::vector<std::int64_t> targets(5000);
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int64_t>(i % 3);
  for (const char* how : {"none", "gzip", "gzip:9"}) {
    const std::string p = path(std::string("c_") + (how[4] == ':' ? "9" : how) + ".h5");
    {
      h5::File f = h5::File::create(p);
      f.set_compression(h5::parse_compression(how));
      f.write("big", big.data(), {600, 500});
      f.write("targets", targets);
      Tensor half(DType::fp16, {50, 40});
      for (std::int64_t k = 0; k < half.numel(); ++k) half.set(k, static_cast<double>(k % 5));
      f.create_group("g").write_tensor("half", half);
      f.write("scalar", big.data(), {});
      f.write("empty", big.data(), {0, 3});
      const h5::StorageTotals t = f.storage_totals();
      EXPECT_EQ(t.datasets, 5);
      EXPECT_EQ(t.raw_bytes, 300000u * 8 + 5000u * 8 + 2000u * 2 + 8u);
      if (std::string(how) == "none") {
        EXPECT_EQ(t.stored_bytes, t.raw_bytes);
      } else {
        EXPECT_LT(t.stored_bytes * 10, t.raw_bytes) << how;  // these data compress > 10×
      }
      f.close();
    }
    const h5::File f = h5::File::open_read(p);
    EXPECT_TRUE(f.declares_checksums());
    EXPECT_EQ(f.open_dataset("big").read_double(), big) << how;
    EXPECT_EQ(f.open_dataset("targets").read_int64(), targets) << how;
    const Tensor half = f.open_dataset("g/half").read_tensor();
    for (std::int64_t k = 0; k < half.numel(); ++k)
      ASSERT_EQ(half.get(k), static_cast<double>(k % 5)) << how;
    EXPECT_EQ(f.open_dataset("scalar").read_double(), std::vector<double>{big[0]});
    EXPECT_TRUE(f.open_dataset("empty").read_double().empty());
    EXPECT_NO_THROW(f.verify_digests());
    const h5::DatasetInfo inf = f.open_dataset("big").info();
    if (std::string(how) == "none") {
      EXPECT_TRUE(inf.filters.empty());
    } else {
      EXPECT_EQ(inf.filters, (std::vector<std::string>{"shuffle", "deflate"}));
    }
  }
  EXPECT_THROW(h5::parse_compression("gzip:0"), InputError);
  EXPECT_THROW(h5::parse_compression("lzf"), InputError);
  EXPECT_THROW(h5::parse_compression("gzip:10"), InputError);
}

TEST_F(H5Storage, ADigestThatDoesNotMatchIsRefusedNamingTheDataset) {
  const std::vector<double> a = values(1000, 5);
  {
    h5::File f = h5::File::create(path("d.h5"));
    f.create_group("reference").write("dH", a.data(), {100, 10});
    f.write("other", a);
    f.close();
  }
  // The digest is the SHA-256 of the little-endian float64 bytes (what h5py's
  // ds[()].astype("<f8").tobytes() gives): "abc"-style known answer for the empty dataset aside,
  // checked here by flipping one stored byte.
  fs::copy_file(path("d.h5"), path("flip.h5"));
  testing::flip_dataset_byte(path("flip.h5"), "/reference/dH", 4321);
  {
    const h5::File f = h5::File::open_read(path("flip.h5"));
    EXPECT_EQ(f.open_dataset("other").read_double(), a);  // the undamaged one still reads
    const std::string e = format_error([&] { f.open_dataset("reference/dH").read_double(); });
    EXPECT_TRUE(has(e, "flip.h5:/reference/dH")) << e;
    EXPECT_TRUE(has(e, "do not match its sha256 digest")) << e;
    const std::string w = format_error([&] { f.verify_digests(); });
    EXPECT_TRUE(has(w, "flip.h5:/reference/dH")) << w;
  }
  // A dataset without a digest in a file that declares checksums (added afterwards by another
  // writer): refused. The same dataset in a file without the declaration (h5py's) is read.
  {
    const hid_t f = H5Fopen(path("d.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    write_c(f, "added", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, a.data(), {1000}, {}, false, false,
            false, H5D_CONTIGUOUS);
    H5Fclose(f);
  }
  const h5::File f = h5::File::open_read(path("d.h5"));
  const std::string e = format_error([&] { f.open_dataset("added").read_double(); });
  EXPECT_TRUE(has(e, "d.h5:/added: carries no sha256 digest")) << e;
  // An empty dataset's digest is the SHA-256 of no bytes (FIPS 180-4's known answer).
  {
    h5::File g = h5::File::create(path("e.h5"));
    g.write("empty", a.data(), {0});
    g.close();
  }
  EXPECT_EQ(h5::File::open_read(path("e.h5")).open_dataset("empty").attr_string("sha256"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace xentlab
