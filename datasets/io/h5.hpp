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
//    values.
//  - every tensor written by write_tensor carries the attribute dtype ("fp32", "fp16", "bf16",
//    "fp64"); int64 datasets (targets, indices) carry none.
//  - strings are variable-length UTF-8 attributes (h5py returns str).
#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "datasets/tensor.hpp"

namespace xentlab::h5 {

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
  bool is_signed = true;            ///< integers only
  std::vector<std::int64_t> shape;  ///< empty for a scalar
  std::string dtype_attr;           ///< the "dtype" attribute, "" when absent
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
  Object(Handle h, std::string file, std::string path)
      : h_(std::move(h)), file_(std::move(file)), path_(std::move(path)) {}
  Object() = default;
  Handle h_;
  std::string file_, path_;
};

/// A dataset opened for reading.
class Dataset : public Object {
 public:
  DatasetInfo info() const;
  /// All elements converted to double by HDF5 (floating and integer datasets; a bf16 dataset is
  /// decoded from its bit patterns). Throws FormatError for other classes.
  std::vector<double> read_double() const;
  /// All elements of an integer dataset as int64 (HDF5 converts; out-of-range values fail).
  std::vector<std::int64_t> read_int64() const;
  /// The dataset as a Tensor in its stored dtype: float64/float32/IEEE-half datasets, or uint16
  /// with dtype="bf16". Throws FormatError for anything else (integers, other float formats).
  Tensor read_tensor() const;

 private:
  friend class Group;
  using Object::Object;
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

 protected:
  friend class File;
  using Object::Object;
};

/// An HDF5 file. Open for reading checks first that the file exists, can be read ("cannot read
/// PATH: reason") and carries the HDF5 signature, so a foreign file gives "not an HDF5 file" and a
/// file with the signature that HDF5 cannot open (locked by a writer, truncated) "cannot be
/// opened (locked by another process …, or truncated or damaged)".
class File : public Group {
 public:
  static File open_read(const std::string& path);
  /// Opens an existing file for reading and writing (used on a temporary copy, see
  /// atomic_file.hpp); the same checks as open_read.
  static File open_rw(const std::string& path);
  /// Creates (truncates) path. Callers write to a temporary name (see atomic_file.hpp).
  static File create(const std::string& path);
  /// Flushes and closes; errors are reported (the destructor closes silently).
  void close();

 private:
  static File open(const std::string& path, bool writable);
};

/// HDF5's half-float type (a copy of H5T_IEEE_F32LE with binary16 fields); caller owns it.
Handle make_half_type();

}  // namespace xentlab::h5
