// Golden files and candidates as stored (datasets/io/h5.hpp, docs/formats.md): a candidate written
// through gzip and shuffle (as h5py's compression="gzip") is judged as its contiguous twin; every
// dataset of a golden file carries a sha256 digest, and bytes flipped in a reference output, a
// bound or a problem array are refused naming that dataset; a golden file from before digests is
// read with a warning; `golden --compress` round-trips and is smaller.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "datasets/catalog.hpp"
#include "datasets/io/h5.hpp"
#include "harness/verify/golden.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/error.hpp"
#include "tests/support/h5_damage.hpp"
#include "tests/support/temp_folder.hpp"

namespace xentlab {
namespace {
namespace fs = std::filesystem;

class GoldenStorage : public testing::TempFolderTest {
 protected:
  GoldenStorage() : TempFolderTest("goldenstorage") {}
  void SetUp() override {
    TempFolderTest::SetUp();
    DatasetParams p;
    p.N = 32;
    p.seed = 4;
    ds_ = make_dataset("stories260k", p);
  }
  DatasetInstance ds_;
};

// Removes the digests: the root's checksums attribute and every dataset's sha256, as a golden file
// written before xentlab stored them.
void strip_digests(hid_t group) {
  std::vector<std::string> names;
  H5Literate(
      group, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* n, const H5L_info_t* info, void* data) -> herr_t {
        if (info->type == H5L_TYPE_HARD) static_cast<std::vector<std::string>*>(data)->push_back(n);
        return 0;
      },
      &names);
  for (const std::string& n : names) {
    const hid_t o = H5Oopen(group, n.c_str(), H5P_DEFAULT);
    if (H5Iget_type(o) == H5I_GROUP) strip_digests(o);
    if (H5Aexists(o, "sha256") > 0) H5Adelete(o, "sha256");
    H5Oclose(o);
  }
}

// A candidate written as h5py writes one with compression="gzip", shuffle=True: root attributes
// format and format_version, each output chunked (chunks not dividing the shape) through shuffle
// and deflate, in float32; no digests.
void write_gzip_candidate(const std::string& path, const Golden& g) {
  h5::File f = h5::File::create(path);
  f.set_attr("format", kCandidateFormat);
  f.set_attr("format_version", kCandidateVersion);
  ASSERT_GE(H5Adelete(f.id(), h5::kChecksumsAttr), 0);  // h5py declares none
  const std::pair<const char*, std::pair<const std::vector<double>*, std::vector<hsize_t>>> outs[] =
      {{"loss", {&g.loss, {static_cast<hsize_t>(g.S)}}},
       {"lse", {&g.lse, {static_cast<hsize_t>(g.S)}}},
       {"dH", {&g.dH, {static_cast<hsize_t>(g.S), static_cast<hsize_t>(g.D)}}},
       {"dW", {&g.dW, {static_cast<hsize_t>(g.J), static_cast<hsize_t>(g.D)}}},
       {"db", {&g.db, {static_cast<hsize_t>(g.J)}}}};
  for (const auto& [name, what] : outs) {
    const auto& [v, dims] = what;
    const std::vector<float> x(v->begin(), v->end());
    std::vector<hsize_t> chunk(dims.size());
    for (std::size_t k = 0; k < dims.size(); ++k) chunk[k] = std::max<hsize_t>(1, dims[k] / 3 + 1);
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 4);
    const hid_t d = H5Dcreate2(f.id(), name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    ASSERT_GE(d, 0) << name;
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), 0) << name;
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  f.close();
}

TEST_F(GoldenStorage, AGzipShuffleCandidateIsJudgedAsItsContiguousTwin) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  const Golden g = read_golden(path("g.h5"));
  write_gzip_candidate(path("gz.h5"), g);
  std::vector<std::pair<std::string, Tensor>> plain;
  for (const char* n : {"loss", "lse", "dH", "dW", "db"}) {
    RefOutput ro;
    ref_output(g, n, ro);
    Tensor t(DType::fp32, ro.shape);
    for (std::size_t k = 0; k < ro.ref->size(); ++k)
      t.set(static_cast<std::int64_t>(k), (*ro.ref)[k]);
    plain.emplace_back(n, std::move(t));
  }
  write_candidate(path("plain.h5"), false, plain, "");
  const VerifyPolicy pol = make_verify_policy("fp32");
  const std::vector<std::string> held{"loss", "lse", "dH", "dW", "db"};  // no reduced_loss
  const VerifyReport gz = verify_candidate(g, path("gz.h5"), pol, held);
  const VerifyReport pl = verify_candidate(g, path("plain.h5"), pol, held);
  EXPECT_TRUE(gz.passed) << format_report(gz);
  ASSERT_EQ(gz.outputs.size(), pl.outputs.size());
  for (std::size_t k = 0; k < gz.outputs.size(); ++k) {
    const OutputReport &a = gz.outputs[k], &b = pl.outputs[k];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.status, b.status) << a.name << ": " << a.message;
    ASSERT_TRUE(a.stats && b.stats) << a.name;
    EXPECT_EQ(a.stats->max_abs_err, b.stats->max_abs_err) << a.name;  // the same values read
    EXPECT_EQ(a.stats->normwise_rel_err, b.stats->normwise_rel_err) << a.name;
  }
}

TEST_F(GoldenStorage, BytesFlippedInAnyDatasetAreRefusedNamingIt) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  EXPECT_TRUE(read_golden(path("g.h5")).checksums);
  // A reference output, a bound, the problem's arrays, the sampled rows, and a covariate verify
  // does not use: each refused by name, never judged.
  for (const char* name :
       {"/reference/dH", "/reference/dW_bound", "/reference/loss_bound", "/problem/W", "/problem/H",
        "/problem/targets", "/reference/token_rows", "/covariates/ce"}) {
    fs::copy_file(path("g.h5"), path("bad.h5"), fs::copy_options::overwrite_existing);
    testing::flip_dataset_byte(path("bad.h5"), name, 1001);
    try {
      read_golden(path("bad.h5"));
      ADD_FAILURE() << name << ": read without an error";
    } catch (const FormatError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(path("bad.h5") + ":" + name + ": its data do not match its sha256 digest"),
                std::string::npos)
          << m;
    }
  }
}

TEST_F(GoldenStorage, ACandidateWithBytesFlippedIsRefusedNotJudged) {
  // A candidate written by xentlab carries digests too: a damaged output makes the file invalid
  // (FormatError, exit 2) rather than an output judged on values nobody computed.
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  const Golden g = read_golden(path("g.h5"));
  Tensor dH(DType::fp32, {g.S, g.D});
  for (std::size_t k = 0; k < g.dH.size(); ++k) dH.set(static_cast<std::int64_t>(k), g.dH[k]);
  write_candidate(path("c.h5"), false, {{"dH", dH}}, "");
  EXPECT_TRUE(verify_candidate(g, path("c.h5"), make_verify_policy("fp32"), {"dH"}).passed);
  testing::flip_dataset_byte(path("c.h5"), "/dH", 77);
  try {
    verify_candidate(g, path("c.h5"), make_verify_policy("fp32"), {"dH"});
    ADD_FAILURE() << "a damaged candidate was judged";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(path("c.h5") + ":/dH: its data do not match"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(GoldenStorage, AGoldenFileWithoutDigestsIsReadWithAWarning) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  fs::copy_file(path("g.h5"), path("old.h5"));
  {
    const hid_t f = H5Fopen(path("old.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Adelete(f, h5::kChecksumsAttr), 0);
    ASSERT_GE(H5Adelete(f, h5::kManifestAttr), 0);
    strip_digests(f);
    H5Fclose(f);
  }
  const Golden now = read_golden(path("g.h5")), old = read_golden(path("old.h5"));
  EXPECT_TRUE(now.checksums);
  EXPECT_EQ(golden_checksum_warning(now), "");
  EXPECT_FALSE(old.checksums);
  EXPECT_NE(golden_checksum_warning(old).find(path("old.h5") +
                                              ": no checksums: written by an older xentlab"),
            std::string::npos)
      << golden_checksum_warning(old);
  EXPECT_EQ(old.dH, now.dH);
  EXPECT_EQ(old.dW_bound, now.dW_bound);
  // A digest removed from one dataset of a file that declares them: refused, naming it — by the
  // manifest where the file has one, else by the declaration of checksums.
  for (const bool manifest : {true, false}) {
    fs::copy_file(path("g.h5"), path("one.h5"), fs::copy_options::overwrite_existing);
    {
      const hid_t f = H5Fopen(path("one.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      const hid_t d = H5Dopen2(f, "/reference/lse", H5P_DEFAULT);
      ASSERT_GE(H5Adelete(d, "sha256"), 0);
      H5Dclose(d);
      if (!manifest) {
        ASSERT_GE(H5Adelete(f, h5::kManifestAttr), 0);
      }
      H5Fclose(f);
    }
    try {
      read_golden(path("one.h5"));
      ADD_FAILURE() << "a dataset without its digest was read";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    manifest ? "now: dataset /reference/lse float64 (32) sha256=none"
                             : "one.h5:/reference/lse: carries no sha256 "
                               "digest"),
                std::string::npos)
          << e.what();
    }
  }
}

// What the digests cannot see — a dataset deleted (a reference output the candidate would then
// not be held to), a dataset added, an attribute edited (the loss spec) — is refused by the
// manifest stored with the file, naming what changed; a file from before manifests is read with
// a warning.
TEST_F(GoldenStorage, DeletedDatasetsAndEditedAttributesAreRefusedNamingThem) {
  write_golden(path("g.h5"), ds_, ds_.spec, {});
  EXPECT_TRUE(read_golden(path("g.h5")).manifest);
  const auto refused = [&](const std::string& file, const std::string& expected) {
    try {
      read_golden(file);
      ADD_FAILURE() << expected << ": read without an error";
    } catch (const FormatError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(file + ": the file was changed after it was written"), std::string::npos)
          << m;
      EXPECT_NE(m.find(expected), std::string::npos) << m;
    }
  };
  const auto edited = [&](const char* name, const std::function<void(hid_t)>& edit) {
    const std::string p = path(name);
    fs::copy_file(path("g.h5"), p, fs::copy_options::overwrite_existing);
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    edit(f);
    H5Fclose(f);
    return p;
  };
  for (const char* gone : {"/reference/dW", "/reference/dH_bound", "/covariates/entropy"}) {
    const std::string p =
        edited("deleted.h5", [&](hid_t f) { ASSERT_GE(H5Ldelete(f, gone, H5P_DEFAULT), 0); });
    refused(p, fmt::format("as written: dataset {} float64 (", gone));
  }
  const std::string smoothing = edited("edited.h5", [](hid_t f) {
    const hid_t g = H5Gopen2(f, "/spec", H5P_DEFAULT);
    const double v = 0.25;
    if (H5Aexists(g, "label_smoothing") > 0) H5Adelete(g, "label_smoothing");
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate2(g, "label_smoothing", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Gclose(g);
  });
  refused(smoothing, "now: attribute /spec@label_smoothing=0.25");
  const std::string added = edited("added.h5", [](hid_t f) {
    const hsize_t n = 2;
    const double x[2] = {1, 2};
    const hid_t sp = H5Screate_simple(1, &n, nullptr);
    const hid_t d = H5Dcreate2(f, "/reference/extra", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
    H5Dclose(d);
    H5Sclose(sp);
  });
  refused(added, "now: dataset /reference/extra float64 (2) sha256=none");
  // A forged attribute value cannot pass for a line of the manifest: dH deleted, and a string
  // attribute made to hold the line that listed it.
  const std::string digest = h5::File::open_read(path("g.h5"))
                                 .open_group("reference")
                                 .open_dataset("dH")
                                 .attr_string(h5::kDigestAttr);
  const std::string forged = path("forged.h5");
  fs::copy_file(path("g.h5"), forged, fs::copy_options::overwrite_existing);
  {
    const hid_t f = H5Fopen(forged.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(H5Ldelete(f, "/reference/dH", H5P_DEFAULT), 0);
    H5Fclose(f);
    h5::File rw = h5::File::open_rw(forged);
    rw.open_group("reference").set_attr("note", "x\ndataset /reference/dH sha256=" + digest);
    rw.close();
  }
  refused(forged, "as written: dataset /reference/dH float64 (");
  // Links: a hard link back up (a loop the walks must not follow without end), a soft link where
  // an optional dataset would be read, and the same bytes stored as another type.
  refused(edited("loop.h5",
                 [](hid_t f) {
                   ASSERT_GE(H5Lcreate_hard(f, "/covariates", f, "/covariates/loop", H5P_DEFAULT,
                                            H5P_DEFAULT),
                             0);
                 }),
          "now: hardlink /covariates/loop to an object listed before");
  refused(edited("soft.h5",
                 [](hid_t f) {
                   ASSERT_GE(H5Lcreate_soft("/covariates/ce", f, "/spec/upstream", H5P_DEFAULT,
                                            H5P_DEFAULT),
                             0);
                 }),
          "now: softlink /spec/upstream");
  const std::string retyped = edited("retyped.h5", [](hid_t f) {
    const hid_t d = H5Dopen2(f, "/reference/dW_bound", H5P_DEFAULT);
    const hid_t sp = H5Dget_space(d);
    std::vector<double> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(sp)));
    ASSERT_GE(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(d);
    ASSERT_GE(H5Ldelete(f, "/reference/dW_bound", H5P_DEFAULT), 0);
    const hid_t e = H5Dcreate2(f, "/reference/dW_bound", H5T_STD_I64LE, sp, H5P_DEFAULT,
                               H5P_DEFAULT, H5P_DEFAULT);
    // The same eight bytes per element, read as integers.
    ASSERT_GE(H5Dwrite(e, H5T_STD_I64LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    H5Dclose(e);
    H5Sclose(sp);
  });
  refused(retyped, "now: dataset /reference/dW_bound int64");
  {  // Without its manifest, a file with a loop is still read (each object once), not a crash.
    const std::string p = edited("oldloop.h5", [](hid_t f) {
      ASSERT_GE(H5Adelete(f, h5::kManifestAttr), 0);
      ASSERT_GE(H5Lcreate_hard(f, "/covariates", f, "/covariates/loop", H5P_DEFAULT, H5P_DEFAULT),
                0);
    });
    EXPECT_FALSE(read_golden(p).manifest);
  }
  // Without a manifest (an older file): read, with a warning saying what cannot be checked.
  const std::string old =
      edited("old.h5", [](hid_t f) { ASSERT_GE(H5Adelete(f, h5::kManifestAttr), 0); });
  const Golden g = read_golden(old);
  EXPECT_FALSE(g.manifest);
  EXPECT_NE(golden_checksum_warning(g).find(old + ": no manifest"), std::string::npos)
      << golden_checksum_warning(g);
}

TEST_F(GoldenStorage, CompressedGoldenRoundTripsAndIsSmaller) {
  GoldenOptions plain_o, gz_o;
  gz_o.compression = h5::parse_compression("gzip:6");
  const GoldenSummary plain = write_golden(path("plain.h5"), ds_, ds_.spec, plain_o);
  const GoldenSummary gz = write_golden(path("gz.h5"), ds_, ds_.spec, gz_o);
  EXPECT_EQ(plain.storage.raw_bytes, gz.storage.raw_bytes);
  EXPECT_EQ(plain.storage.stored_bytes, plain.storage.raw_bytes);
  EXPECT_LT(gz.storage.stored_bytes, gz.storage.raw_bytes);
  EXPECT_LT(fs::file_size(path("gz.h5")), fs::file_size(path("plain.h5")));
  const Golden a = read_golden(path("plain.h5")), b = read_golden(path("gz.h5"));
  EXPECT_TRUE(b.checksums);
  ASSERT_EQ(a.problem.W.nbytes(), b.problem.W.nbytes());
  EXPECT_EQ(0, std::memcmp(a.problem.W.data(), b.problem.W.data(), a.problem.W.nbytes()));
  EXPECT_EQ(0, std::memcmp(a.problem.H.data(), b.problem.H.data(), a.problem.H.nbytes()));
  EXPECT_EQ(a.problem.targets, b.problem.targets);
  for (const auto& [x, y] : {std::pair{&a.loss, &b.loss},
                             {&a.dH, &b.dH},
                             {&a.dW, &b.dW},
                             {&a.db_bound, &b.db_bound},
                             {&a.gemm_abs, &b.gemm_abs}})
    EXPECT_EQ(*x, *y);
  EXPECT_EQ(a.reduced_loss, b.reduced_loss);
  EXPECT_EQ(h5::File::open_read(path("gz.h5")).open_dataset("reference/dW").info().filters,
            (std::vector<std::string>{"shuffle", "deflate"}));
  // A byte flipped inside a compressed chunk: refused too, naming the dataset (a deflate error,
  // or data that do not match the digest).
  fs::copy_file(path("gz.h5"), path("gz_bad.h5"));
  {
    const hid_t f = H5Fopen(path("gz_bad.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, "/reference/dW", H5P_DEFAULT);
    const hsize_t origin[2] = {0, 0};
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    ASSERT_GE(H5Dget_chunk_info_by_coord(d, origin, &mask, &addr, &size), 0);
    H5Dclose(d);
    H5Fclose(f);
    ASSERT_NE(addr, HADDR_UNDEF);
    std::fstream io(path("gz_bad.h5"), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(addr + size / 2));
    const char c = 0x5a;
    io.write(&c, 1);
  }
  try {
    read_golden(path("gz_bad.h5"));
    ADD_FAILURE() << "a damaged compressed chunk was read";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(path("gz_bad.h5") + ":/reference/dW: "), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace xentlab
