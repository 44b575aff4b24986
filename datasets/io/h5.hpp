#pragma once
// A small RAII wrapper over the HDF5 C API (1.10+), used by every xentlab file format (golden,
// candidate, results). It owns every hid_t it opens, turns every HDF5 failure into a FormatError
// (reading) or an OutputError (creating, writing, flushing: with the system's reason, e.g. "No
// space left on device", and the destination's name for an AtomicOutput's temporary file) that
// names the file and the object, and silences HDF5's automatic error printing (the message we
// throw is the only report).
//
// Storage conventions (docs/formats.md, readable with h5py without any plugin):
//  - fp64, fp32: IEEE little-endian doubles and floats (h5py: float64, float32).
//  - fp16: IEEE binary16 (an H5T_IEEE_F32LE copy with fields 15/10/5/0/10, ebias 15); h5py reads it
//    as numpy float16.
//  - bf16: its uint16 bit patterns with the attribute dtype="bf16" (neither HDF5 nor numpy has a
//    bfloat16 type); in h5py `(f["W"][()].astype("uint32") << 16).view("float32")` gives the
//    values. Signed 16-bit integers with that attribute are read as the same bits (PyTorch
//    writes `t.view(torch.int16)`).
//  - every tensor written by write_tensor carries the attribute dtype ("fp32", "fp16", "bf16",
//    "fp64"); int64 datasets (targets, indices) carry none.
//  - strings are variable-length UTF-8 attributes (h5py returns str).
//  - every dataset written here carries the attribute sha256: the SHA-256 of its elements' logical
//    little-endian bytes in row-major order (the bytes of
//    `ds[()].astype(ds.dtype.newbyteorder("<")) .tobytes()` in h5py), whatever its layout or
//    filters; every file created here declares it with the root attribute checksums="sha256". Every
//    read checks the digest of a dataset that has one, and in a file that declares checksums
//    refuses a dataset without one.
//  - datasets are contiguous, or chunked through HDF5's shuffle and deflate filters when the file
//    is written with a Compression (File::set_compression). Any layout and filter h5py writes is
//    read (contiguous, compact, chunked; gzip, shuffle, fletcher32, szip, n-bit, scale-offset; a
//    filter this HDF5 library lacks, such as h5py's lzf, is refused naming it).
#include <hdf5.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "datasets/tensor.hpp"

namespace xentlab::h5 {

/// The attribute holding a dataset's digest, and the root attribute declaring that every dataset
/// of the file holds one (value "sha256").
inline constexpr const char* kDigestAttr = "sha256";
inline constexpr const char* kChecksumsAttr = "checksums";
/// The root attribute listing, as written, every group and dataset of the file (with its digest)
/// and every attribute with its value (File::write_manifest): a file whose objects or attributes
/// were deleted, added or edited after it was written no longer matches it.
inline constexpr const char* kManifestAttr = "manifest";
/// The manifest's first line (its format: docs/formats.md, "The manifest").
inline constexpr const char* kManifestHeader = "xentlab-manifest 1";

/// How the datasets of a file are written (File::set_compression): contiguous and uncompressed
/// (gzip_level 0, the default), or chunked (chunks of about 1 MiB) through HDF5's shuffle and
/// deflate filters at gzip_level 1–9. Scalars and empty datasets are always contiguous.
struct Compression {
  int gzip_level = 0;
  bool enabled() const { return gzip_level > 0; }
  /// "none" or "gzip:LEVEL with shuffle".
  std::string describe() const;
};

/// "none", "gzip" (level 4, h5py's default) or "gzip:LEVEL" (LEVEL 1–9). Throws InputError naming
/// the text and the accepted forms.
Compression parse_compression(const std::string& text);

/// The data of the datasets under a group: raw = elements × element size, stored = the bytes HDF5
/// allocated for them (smaller than raw when compressed).
struct StorageTotals {
  std::uint64_t raw_bytes = 0, stored_bytes = 0;
  std::int64_t datasets = 0;
};

namespace detail {
struct FileState;  // what the objects of one open file share (h5_detail.hpp)
}

/// An owned HDF5 identifier, closed with the matching H5?close on destruction.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept;
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

/// What a stored dataset holds: its element class and size, shape and xentlab dtype attribute.
struct DatasetInfo {
  enum class Kind { floating, integer, other } kind = Kind::other;
  int element_bytes = 0;
  bool is_signed = true;             ///< integers only
  std::vector<std::int64_t> shape;   ///< empty for a scalar
  std::string dtype_attr;            ///< the "dtype" attribute, "" when absent
  std::uint64_t stored_bytes = 0;    ///< bytes allocated in the file (compressed: fewer than raw)
  std::vector<std::string> filters;  ///< the filter pipeline's names ("shuffle", "deflate", …)
  std::int64_t numel() const;
  /// "float32 (3, 4)"-style description for messages.
  std::string describe() const;
};

class Group;

/// An HDF5 object (file, group or dataset) that can carry attributes. `where()` is
/// "file.h5:/path/to/object", used in every error message.
class Object {
 public:
  hid_t id() const { return h_.get(); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  std::string where() const { return file_ + ":" + path_; }

  bool has_attr(const std::string& name) const;
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, const char* value) { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, double value);
  void set_attr(const std::string& name, std::int64_t value);
  void set_attr(const std::string& name, int value) { set_attr(name, std::int64_t{value}); }
  void set_attr(const std::string& name, bool value) { set_attr(name, std::int64_t{value}); }
  /// Readers throw FormatError naming the object and attribute when it is missing or of a type that
  /// does not convert (a string read as a number, …); attr_int also when the value is not a whole
  /// number (a float attribute 1.5 is not the integer 1).
  std::string attr_string(const std::string& name) const;
  double attr_double(const std::string& name) const;
  std::int64_t attr_int(const std::string& name) const;

 protected:
  Object(Handle h, std::string file, std::string path, std::shared_ptr<detail::FileState> state)
      : h_(std::move(h)),
        file_(std::move(file)),
        path_(std::move(path)),
        state_(std::move(state)) {}
  Object() = default;
  Handle h_;
  std::string file_, path_;
  std::shared_ptr<detail::FileState> state_;
};

/// A dataset opened for reading. Every read (read_double, read_int64, read_tensor, verify_digest)
/// checks the dataset's sha256 attribute, where it has one, against the bytes read, and throws
/// FormatError naming the dataset when they differ (the file was altered or damaged after it was
/// written) or when the file declares checksums and the dataset has none.
class Dataset : public Object {
 public:
  /// Its type and shape, after checking that its stored bytes can back the declared elements:
  /// a contiguous dataset must store them all (and inside the file), a chunked one every chunk
  /// (a chunk never written would read as the fill value: "partly written"), and its filters
  /// must be available in this HDF5 library. Throws FormatError naming the dataset.
  DatasetInfo info() const;
  /// All elements converted to double by HDF5 (floating and integer datasets; a bf16 dataset is
  /// decoded from its bit patterns). Throws FormatError for other classes.
  std::vector<double> read_double() const;
  /// All elements of an integer dataset as int64 (HDF5 converts; out-of-range values fail).
  std::vector<std::int64_t> read_int64() const;
  /// The dataset as a Tensor in its stored dtype: float64/float32/IEEE-half datasets, or uint16
  /// with dtype="bf16". Throws FormatError for anything else (integers, other float formats).
  Tensor read_tensor() const;
  /// The dtype read_tensor gives, without reading the data; the same FormatError for a dataset
  /// that is no tensor (integers without dtype="bf16", another float format, a dtype attribute
  /// that disagrees with the stored type).
  DType tensor_dtype() const;
  /// Reads the stored elements and checks them against the sha256 attribute (nothing to check
  /// without one, unless the file declares checksums). Throws FormatError naming the dataset.
  void verify_digest() const;

 private:
  friend class Group;
  using Object::Object;
  // Reads all n elements into dst as mem_type, checking the digest on the way (h5_storage.cpp).
  void read_checked(hid_t mem_type, void* dst, std::size_t n) const;
  // The storage checks of info() (h5_storage.cpp).
  void check_storage(DatasetInfo& inf, std::uint64_t n) const;
};

/// A group (the File is its root group). Child names may be paths ("reference/dW").
class Group : public Object {
 public:
  /// True when the link exists (every intermediate group is checked, no error for a missing one).
  bool exists(const std::string& name) const;
  Group create_group(const std::string& name);
  Group open_group(const std::string& name) const;
  /// A soft link `name` (intermediate groups created) to the object at the absolute path target.
  void create_soft_link(const std::string& name, const std::string& target);
  Dataset open_dataset(const std::string& name) const;
  /// Names of the direct children (groups and datasets), in creation/alphabetical order.
  std::vector<std::string> children() const;

  // Typed writes of contiguous row-major data with the given shape (empty shape = scalar).
  void write(const std::string& name, const double* data, const std::vector<std::int64_t>& shape);
  void write(const std::string& name, const float* data, const std::vector<std::int64_t>& shape);
  void write(const std::string& name, const std::int64_t* data,
             const std::vector<std::int64_t>& shape);
  void write(const std::string& name, const std::uint16_t* data,
             const std::vector<std::int64_t>& shape);
  /// IEEE binary16 bit patterns written as HDF5 half floats (h5py reads float16).
  void write_half_bits(const std::string& name, const std::uint16_t* bits,
                       const std::vector<std::int64_t>& shape);
  void write(const std::string& name, const std::vector<double>& v) {
    write(name, v.data(), {static_cast<std::int64_t>(v.size())});
  }
  void write(const std::string& name, const std::vector<std::int64_t>& v) {
    write(name, v.data(), {static_cast<std::int64_t>(v.size())});
  }
  /// A Tensor in its own dtype, with the dtype attribute (see the conventions above).
  void write_tensor(const std::string& name, const Tensor& t);

  /// Raw and stored bytes of every dataset below (hard links only: a soft link's target is
  /// counted where it lives).
  StorageTotals storage_totals() const;
  /// Checks the digest of every dataset below not yet checked through this file's objects (a
  /// read checks it): FormatError naming the first that does not match, or, in a file that
  /// declares checksums, that carries none.
  void verify_digests() const;
  /// The line kManifestHeader, then one line per link below, in name order: "group PATH",
  /// "dataset PATH TYPE (SHAPE) sha256=DIGEST" (TYPE as stored, e.g. float64; DIGEST "none" where
  /// it carries none), "softlink PATH", "extlink PATH", "hardlink PATH to an object listed
  /// before" (a second link, or a loop, never walked twice), then "attribute
  /// PATH@NAME=VALUE" for each attribute (strings quoted; numbers with 17 significant digits) but
  /// the root's manifest itself and a dataset's digest. Paths, names and strings are escaped
  /// (backslash, '"', control characters), so no value can span or fake a line. Hard links only.
  std::string manifest() const;

 protected:
  friend class File;
  using Object::Object;

 private:
  // Calls f on every dataset below, through hard links only (each object once: `seen` holds the
  // identities of the objects met, so a second link or a loop is not walked again).
  void for_each_dataset(const std::function<void(const Dataset&)>& f) const;
  void for_each_dataset(const std::function<void(const Dataset&)>& f,
                        std::set<std::string>& seen) const;
  // Appends this group's manifest lines (its attributes, then each link in name order).
  void manifest_lines(std::vector<std::string>& out, std::set<std::string>& seen) const;
  void write_raw(const std::string& name, hid_t file_type, hid_t mem_type, const void* data,
                 const std::vector<std::int64_t>& shape);
};

/// An HDF5 file. Open for reading checks first that the file exists, can be read ("cannot read
/// PATH: reason") and carries the HDF5 signature, so a foreign file gives "not an HDF5 file" and a
/// file with the signature that HDF5 cannot open (locked by a writer, truncated) "cannot be
/// opened (locked by another process …, or truncated or damaged)". A root attribute checksums
/// other than "sha256" is refused (a digest this xentlab cannot check).
class File : public Group {
 public:
  static File open_read(const std::string& path);
  /// Opens an existing file for reading and writing (used on a temporary copy, see
  /// atomic_file.hpp); the same checks as open_read.
  static File open_rw(const std::string& path);
  /// Creates (truncates) path, with the root attribute checksums="sha256". Callers write to a
  /// temporary name (see atomic_file.hpp).
  static File create(const std::string& path);
  /// How the datasets written from now on through any group of this file are stored.
  void set_compression(const Compression& c);
  /// True when the root declares checksums="sha256" (every dataset carries a digest).
  bool declares_checksums() const;
  /// Stores manifest() as the root attribute manifest: call it last, when every dataset and
  /// attribute is written.
  void write_manifest();
  /// True when the root carries a manifest.
  bool has_manifest() const { return has_attr(kManifestAttr); }
  /// Compares the root's manifest with the file as it is now: FormatError naming the first
  /// objects or attributes that were deleted, added or changed since it was written (nothing to
  /// check in a file without one).
  void verify_manifest() const;
  /// Flushes and closes; errors are reported (the destructor closes silently).
  void close();

 private:
  static File open(const std::string& path, bool writable);
};

/// HDF5's half-float type (a copy of H5T_IEEE_F32LE with binary16 fields); caller owns it.
Handle make_half_type();

}  // namespace xentlab::h5
