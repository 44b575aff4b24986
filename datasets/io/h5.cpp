#include "datasets/io/h5.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5_detail.hpp"
#include "numerics/error.hpp"

namespace xentlab::h5 {
namespace detail {

// HDF5 prints its error stack to stderr by default; every failure here is reported by a FormatError
// (an OutputError while writing) instead. The automatic printer is switched off once per process
// (per thread in a thread-safe build: each entry point calls this).
//
// Also before the library's first call: H5dont_atexit(), so that HDF5 does not shut itself down
// from exit(). After a failed flush (a full disk) the file stays in HDF5's tables with unwritable
// metadata, its temporary file is removed (atomic_file.hpp), and the shutdown at exit crashed in
// H5F__close_cb (found by writing to a 32 KiB tmpfs). Every file this code writes is closed
// explicitly (File::close), so nothing is lost by skipping that shutdown.
void silence() {
  static const bool no_atexit = [] {
    H5dont_atexit();
    return true;
  }();
  (void)no_atexit;
  thread_local bool done = false;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    done = true;
  }
}

namespace {
// The outermost message of the current HDF5 error stack ("" when empty), for error texts, followed
// by the operating system's reason where the file driver recorded one deeper in the stack (its
// description holds "error message = '<strerror>'", e.g. 'No space left on device').
std::string last_error() {
  struct Found {
    std::string top, os;
  } found;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        auto* f = static_cast<Found*>(data);
        if (e->desc == nullptr) return 0;
        const std::string d = e->desc;
        if (n == 0) f->top = d;
        const std::string key = "error message = '";
        const auto at = d.find(key);
        if (f->os.empty() && at != std::string::npos) {
          const auto end = d.find('\'', at + key.size());
          if (end != std::string::npos) f->os = d.substr(at + key.size(), end - at - key.size());
        }
        return 0;
      },
      &found);
  H5Eclear2(H5E_DEFAULT);
  if (found.os.empty() || found.top.empty()) return found.top.empty() ? found.os : found.top;
  return found.top + ": " + found.os;
}

}  // namespace

// Throws FormatError "WHERE: WHAT (HDF5's reason)": a file that cannot be read as what it claims
// to be.
[[noreturn]] void fail(const std::string& where, const std::string& what) {
  const std::string detail = last_error();
  throw FormatError(detail.empty() ? fmt::format("{}: {}", where, what)
                                   : fmt::format("{}: {} ({})", where, what, detail));
}

// Throws OutputError for a failed write (create, write, flush): "WHERE: WHAT (HDF5's reason: the
// system's reason)"; where WHERE is inside the temporary file of an output being written
// (atomic_file.hpp), it names the destination the user asked for.
[[noreturn]] void fail_write(const std::string& where, const std::string& what) {
  const std::string detail = last_error();
  const std::string reason = detail.empty() ? what : fmt::format("{} ({})", what, detail);
  if (const auto out = output_destination(where))
    throw OutputError(
        fmt::format("{}: {} (while writing its temporary file {}; the destination is "
                    "untouched)",
                    out->location, reason, out->temp_name));
  throw OutputError(fmt::format("{}: {}", where, reason));
}

std::string join(const std::string& base, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  return base == "/" ? "/" + name : base + "/" + name;
}

}  // namespace detail

namespace {
using detail::fail;
using detail::fail_write;
using detail::join;
using detail::silence;

std::vector<hsize_t> dims_of(const std::vector<std::int64_t>& shape, const std::string& where) {
  std::vector<hsize_t> d;
  for (std::int64_t e : shape) {
    if (e < 0) throw InputError(fmt::format("{}: negative extent {} in a shape", where, e));
    d.push_back(static_cast<hsize_t>(e));
  }
  return d;
}

Handle make_space(const std::vector<std::int64_t>& shape, const std::string& where) {
  if (shape.empty()) return Handle(H5Screate(H5S_SCALAR));
  const auto d = dims_of(shape, where);
  return Handle(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr));
}

Handle string_type() {
  Handle t(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

bool is_binary16(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
  size_t spos, epos, esize, mpos, msize;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 &&
         H5Tget_ebias(type) == 15;
}

}  // namespace

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && H5Iis_valid(id_) > 0) {
    switch (H5Iget_type(id_)) {
      case H5I_FILE:
        H5Fclose(id_);
        break;
      case H5I_GROUP:
        H5Gclose(id_);
        break;
      case H5I_DATASET:
        H5Dclose(id_);
        break;
      case H5I_ATTR:
        H5Aclose(id_);
        break;
      case H5I_DATATYPE:
        H5Tclose(id_);
        break;
      case H5I_DATASPACE:
        H5Sclose(id_);
        break;
      case H5I_GENPROP_LST:
        H5Pclose(id_);
        break;
      default:
        H5Idec_ref(id_);
        break;
    }
  }
  id_ = H5I_INVALID_HID;
}

Handle make_half_type() {
  // Binary16 as h5py builds it: sign bit 15, exponent bits 10–14 (bias 15), mantissa bits 0–9.
  Handle t(H5Tcopy(H5T_IEEE_F32LE));
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

std::int64_t DatasetInfo::numel() const {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

std::string DatasetInfo::describe() const {
  std::string t;
  if (!dtype_attr.empty())
    t = dtype_attr;
  else if (kind == Kind::floating)
    t = fmt::format("float{}", 8 * element_bytes);
  else if (kind == Kind::integer)
    t = fmt::format("{}int{}", is_signed ? "" : "u", 8 * element_bytes);
  else
    t = "non-numeric";
  std::string s = "(";
  for (std::size_t k = 0; k < shape.size(); ++k) s += fmt::format("{}{}", k ? ", " : "", shape[k]);
  if (shape.size() == 1) s += ",";
  return t + " " + s + ")";
}

// ---------------------------------------------------------------- attributes

bool Object::has_attr(const std::string& name) const {
  silence();
  const htri_t r = H5Aexists(id(), name.c_str());
  if (r < 0) fail(where(), fmt::format("cannot query attribute '{}'", name));
  return r > 0;
}

namespace {
Handle create_attr(const Object& o, const std::string& name, hid_t type) {
  if (o.has_attr(name) && H5Adelete(o.id(), name.c_str()) < 0)
    fail_write(o.where(), fmt::format("cannot replace attribute '{}'", name));
  Handle space(H5Screate(H5S_SCALAR));
  Handle a(H5Acreate2(o.id(), name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a.valid()) fail_write(o.where(), fmt::format("cannot create attribute '{}'", name));
  return a;
}

Handle open_attr(const Object& o, const std::string& name) {
  if (!o.has_attr(name))
    throw FormatError(fmt::format("{}: attribute '{}' is missing", o.where(), name));
  Handle a(H5Aopen(o.id(), name.c_str(), H5P_DEFAULT));
  if (!a.valid()) fail(o.where(), fmt::format("cannot open attribute '{}'", name));
  Handle space(H5Aget_space(a.get()));
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n != 1)
    throw FormatError(
        fmt::format("{}: attribute '{}' holds {} values, expected one", o.where(), name, n));
  return a;
}

template <class T>
T read_numeric_attr(const Object& o, const std::string& name, hid_t mem) {
  Handle a = open_attr(o, name);
  Handle ft(H5Aget_type(a.get()));
  const H5T_class_t c = H5Tget_class(ft.get());
  if (c != H5T_INTEGER && c != H5T_FLOAT)
    throw FormatError(fmt::format("{}: attribute '{}' is not a number", o.where(), name));
  T v{};
  if (H5Aread(a.get(), mem, &v) < 0)
    fail(o.where(), fmt::format("cannot read attribute '{}'", name));
  return v;
}
}  // namespace

void Object::set_attr(const std::string& name, const std::string& value) {
  silence();
  Handle t = string_type();
  Handle a = create_attr(*this, name, t.get());
  const char* p = value.c_str();
  if (H5Awrite(a.get(), t.get(), &p) < 0)
    fail_write(where(), fmt::format("cannot write attribute '{}'", name));
}

void Object::set_attr(const std::string& name, double value) {
  silence();
  Handle a = create_attr(*this, name, H5T_IEEE_F64LE);
  if (H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value) < 0)
    fail_write(where(), fmt::format("cannot write attribute '{}'", name));
}

void Object::set_attr(const std::string& name, std::int64_t value) {
  silence();
  Handle a = create_attr(*this, name, H5T_STD_I64LE);
  if (H5Awrite(a.get(), H5T_NATIVE_INT64, &value) < 0)
    fail_write(where(), fmt::format("cannot write attribute '{}'", name));
}

std::string Object::attr_string(const std::string& name) const {
  silence();
  Handle a = open_attr(*this, name);
  Handle ft(H5Aget_type(a.get()));
  if (H5Tget_class(ft.get()) != H5T_STRING)
    throw FormatError(fmt::format("{}: attribute '{}' is not a string", where(), name));
  if (H5Tis_variable_str(ft.get()) > 0) {
    Handle mt = string_type();
    char* p = nullptr;
    if (H5Aread(a.get(), mt.get(), &p) < 0)
      fail(where(), fmt::format("cannot read attribute '{}'", name));
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t n = H5Tget_size(ft.get());
  std::string buf(n, '\0');
  Handle mt(H5Tcopy(ft.get()));
  if (H5Aread(a.get(), mt.get(), buf.data()) < 0)
    fail(where(), fmt::format("cannot read attribute '{}'", name));
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

double Object::attr_double(const std::string& name) const {
  silence();
  return read_numeric_attr<double>(*this, name, H5T_NATIVE_DOUBLE);
}

std::int64_t Object::attr_int(const std::string& name) const {
  silence();
  // An integer attribute, or a floating one holding a whole number (1.0); 1.5 is not version 1.
  const double v = read_numeric_attr<double>(*this, name, H5T_NATIVE_DOUBLE);
  if (!(std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 0x1p63))
    throw FormatError(fmt::format("{}: attribute '{}' is {}, not an integer", where(), name, v));
  return read_numeric_attr<std::int64_t>(*this, name, H5T_NATIVE_INT64);
}

// ---------------------------------------------------------------- groups

bool Group::exists(const std::string& name) const {
  silence();
  // Check every prefix: H5Lexists fails (instead of returning false) on a missing intermediate.
  std::size_t pos = 0;
  while (true) {
    const std::size_t next = name.find('/', pos);
    const std::string prefix = name.substr(0, next);
    if (!prefix.empty()) {
      const htri_t r = H5Lexists(id(), prefix.c_str(), H5P_DEFAULT);
      if (r <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return false;
      }
    }
    if (next == std::string::npos) return true;
    pos = next + 1;
  }
}

Group Group::create_group(const std::string& name) {
  silence();
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle g(H5Gcreate2(id(), name.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!g.valid()) fail_write(where(), fmt::format("cannot create group '{}'", name));
  return Group(std::move(g), file(), join(path(), name), state_);
}

void Group::create_soft_link(const std::string& name, const std::string& target) {
  silence();
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  if (H5Lcreate_soft(target.c_str(), id(), name.c_str(), lcpl.get(), H5P_DEFAULT) < 0)
    fail_write(where(), fmt::format("cannot create the link '{}' to '{}'", name, target));
}

Group Group::open_group(const std::string& name) const {
  silence();
  if (!exists(name)) throw FormatError(fmt::format("{}: group '{}' is missing", where(), name));
  Handle g(H5Gopen2(id(), name.c_str(), H5P_DEFAULT));
  if (!g.valid()) fail(where(), fmt::format("'{}' is not a group", name));
  return Group(std::move(g), file(), join(path(), name), state_);
}

Dataset Group::open_dataset(const std::string& name) const {
  silence();
  if (!exists(name)) throw FormatError(fmt::format("{}: dataset '{}' is missing", where(), name));
  Handle d(H5Dopen2(id(), name.c_str(), H5P_DEFAULT));
  if (!d.valid()) fail(where(), fmt::format("'{}' is not a dataset", name));
  return Dataset(std::move(d), file(), join(path(), name), state_);
}

std::vector<std::string> Group::children() const {
  silence();
  std::vector<std::string> names;
  H5Literate(
      id(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* n, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(n);
        return 0;
      },
      &names);
  return names;
}

void Group::write_raw(const std::string& name, hid_t file_type, hid_t mem_type, const void* data,
                      const std::vector<std::int64_t>& shape) {
  silence();
  const std::string where = this->where() + (path() == "/" ? "" : "/") + name;
  Handle space = make_space(shape, where);
  if (exists(name) && H5Ldelete(id(), name.c_str(), H5P_DEFAULT) < 0)
    fail_write(where, "cannot replace the existing dataset");
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  const std::size_t bytes = static_cast<std::size_t>(n) * H5Tget_size(file_type);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle dcpl = detail::creation_plist(state_->compression, dims_of(shape, where),
                                       H5Tget_size(file_type), where);
  Handle d(
      H5Dcreate2(id(), name.c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT));
  if (!d.valid()) fail_write(where, "cannot create the dataset");
  if (n > 0 && H5Dwrite(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail_write(where, "cannot write the dataset");
  // The digest of the elements' little-endian bytes: the memory types here are the file types on
  // a little-endian host (h5_storage.cpp checks the byte order at compile time).
  Dataset(std::move(d), file(), join(path(), name), state_)
      .set_attr(kDigestAttr, detail::digest_hex(data, bytes));
}

void Group::write(const std::string& name, const double* data,
                  const std::vector<std::int64_t>& shape) {
  write_raw(name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data, shape);
}
void Group::write(const std::string& name, const float* data,
                  const std::vector<std::int64_t>& shape) {
  write_raw(name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data, shape);
}
void Group::write(const std::string& name, const std::int64_t* data,
                  const std::vector<std::int64_t>& shape) {
  write_raw(name, H5T_STD_I64LE, H5T_NATIVE_INT64, data, shape);
}
void Group::write(const std::string& name, const std::uint16_t* data,
                  const std::vector<std::int64_t>& shape) {
  write_raw(name, H5T_STD_U16LE, H5T_NATIVE_UINT16, data, shape);
}
void Group::write_half_bits(const std::string& name, const std::uint16_t* bits,
                            const std::vector<std::int64_t>& shape) {
  Handle half = make_half_type();
  write_raw(name, half.get(), half.get(), bits, shape);
}

void Group::write_tensor(const std::string& name, const Tensor& t) {
  switch (t.dtype()) {
    case DType::fp64:
      write(name, static_cast<const double*>(t.data()), t.shape());
      break;
    case DType::fp32:
      write(name, static_cast<const float*>(t.data()), t.shape());
      break;
    case DType::fp16:
      write_half_bits(name, static_cast<const std::uint16_t*>(t.data()), t.shape());
      break;
    case DType::bf16:
      write(name, static_cast<const std::uint16_t*>(t.data()), t.shape());
      break;
  }
  open_dataset(name).set_attr("dtype", std::string(to_string(t.dtype())));
}

// ---------------------------------------------------------------- datasets

DatasetInfo Dataset::info() const {
  silence();
  DatasetInfo inf;
  Handle t(H5Dget_type(id()));
  Handle s(H5Dget_space(id()));
  if (!t.valid() || !s.valid()) fail(where(), "cannot read the dataset's type or shape");
  const H5T_class_t c = H5Tget_class(t.get());
  inf.kind = c == H5T_FLOAT     ? DatasetInfo::Kind::floating
             : c == H5T_INTEGER ? DatasetInfo::Kind::integer
                                : DatasetInfo::Kind::other;
  inf.element_bytes = static_cast<int>(H5Tget_size(t.get()));
  if (c == H5T_INTEGER) inf.is_signed = H5Tget_sign(t.get()) == H5T_SGN_2;
  const int rank = H5Sget_simple_extent_ndims(s.get());
  if (rank < 0) fail(where(), "cannot read the dataset's shape");
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(s.get(), d.data(), nullptr);
  // A declared shape must be backed by stored bytes (check_storage): a forged or truncated file
  // that declares 2^40 elements is refused here, before anything is allocated for it.
  std::uint64_t n = 1;
  for (hsize_t e : d) {
    if (e > (std::uint64_t{1} << 62) || (e > 0 && n > (std::uint64_t{1} << 62) / e))
      fail(where(), fmt::format("declares an absurd shape (an extent of {})", e));
    n *= e;
    inf.shape.push_back(static_cast<std::int64_t>(e));
  }
  check_storage(inf, n);
  if (has_attr("dtype")) inf.dtype_attr = attr_string("dtype");
  return inf;
}

std::vector<double> Dataset::read_double() const {
  const DatasetInfo inf = info();
  if (inf.dtype_attr == "bf16" || inf.dtype_attr == "fp16") {
    const Tensor t = read_tensor();
    std::vector<double> v(static_cast<std::size_t>(t.numel()));
    t.read(0, t.numel(), v.data());
    return v;
  }
  if (inf.kind == DatasetInfo::Kind::other)
    throw FormatError(fmt::format("{}: holds {}, not numbers", where(), inf.describe()));
  Handle t(H5Dget_type(id()));
  if (is_binary16(t.get())) {
    const Tensor tt = read_tensor();
    std::vector<double> v(static_cast<std::size_t>(tt.numel()));
    tt.read(0, tt.numel(), v.data());
    return v;
  }
  std::vector<double> v(static_cast<std::size_t>(inf.numel()));
  read_checked(H5T_NATIVE_DOUBLE, v.data(), v.size());
  return v;
}

std::vector<std::int64_t> Dataset::read_int64() const {
  const DatasetInfo inf = info();
  if (inf.kind != DatasetInfo::Kind::integer)
    throw FormatError(fmt::format("{}: holds {}, expected integers", where(), inf.describe()));
  std::vector<std::int64_t> v(static_cast<std::size_t>(inf.numel()));
  read_checked(H5T_NATIVE_INT64, v.data(), v.size());
  return v;
}

DType Dataset::tensor_dtype() const {
  const DatasetInfo inf = info();
  Handle ft(H5Dget_type(id()));
  DType dt;
  if (inf.kind == DatasetInfo::Kind::integer && inf.element_bytes == 2 && inf.dtype_attr == "bf16")
    dt = DType::bf16;
  else if (inf.kind == DatasetInfo::Kind::floating && inf.element_bytes == 8)
    dt = DType::fp64;
  else if (inf.kind == DatasetInfo::Kind::floating && inf.element_bytes == 4)
    dt = DType::fp32;
  else if (is_binary16(ft.get()))
    dt = DType::fp16;
  else
    throw FormatError(fmt::format(
        "{}: holds {}; a tensor must be float64, float32, IEEE float16, or 16-bit integer "
        "(uint16 or int16) bit patterns with the attribute dtype=\"bf16\"",
        where(), inf.describe()));
  if (!inf.dtype_attr.empty() && inf.dtype_attr != to_string(dt))
    throw FormatError(fmt::format("{}: its dtype attribute says {} but it is stored as {}", where(),
                                  inf.dtype_attr, to_string(dt)));
  return dt;
}

Tensor Dataset::read_tensor() const {
  const DType dt = tensor_dtype();
  Handle half;
  hid_t mem_type = H5T_NATIVE_DOUBLE;
  switch (dt) {
    case DType::bf16:
      // The bits as stored: bf16 patterns written as signed 16-bit integers (PyTorch's
      // `t.view(torch.int16)`) are read as int16, whose two's complement is the same 16 bits — a
      // conversion to uint16 would clamp every negative value (sign bit set) to 0.
      mem_type = info().is_signed ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16;
      break;
    case DType::fp32:
      mem_type = H5T_NATIVE_FLOAT;
      break;
    case DType::fp16:
      half = make_half_type();
      mem_type = half.get();
      break;
    case DType::fp64:
      break;
  }
  const std::string leaf = path().substr(path().find_last_of('/') + 1);
  Tensor t(dt, info().shape, leaf);
  read_checked(mem_type, t.data(), static_cast<std::size_t>(t.numel()));
  return t;
}

// ---------------------------------------------------------------- files

File File::open_read(const std::string& path) {
  return open(path, false);
}

File File::open_rw(const std::string& path) {
  return open(path, true);
}

File File::open(const std::string& path, bool writable) {
  silence();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw FormatError(fmt::format("{}: no such file", path));
  if (!std::filesystem::is_regular_file(path, ec))
    throw FormatError(fmt::format("{}: not a regular file", path));
  {
    // A file we may not read (mode 000, another user's) is not "foreign or damaged": say why.
    errno = 0;
    const std::ifstream probe(path, std::ios::binary);
    const int err = errno;
    if (!probe)
      throw FormatError(
          fmt::format("cannot read {}: {}", path, err != 0 ? std::strerror(err) : "unknown error"));
  }
#if H5_VERSION_GE(1, 12, 0)
  const htri_t is = H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  const htri_t is = H5Fis_hdf5(path.c_str());
#endif
  if (is <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw FormatError(
        fmt::format("{}: not an HDF5 file (no readable HDF5 signature: foreign or damaged)", path));
  }
  Handle f(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!f.valid())
    fail(path,
         "has an HDF5 signature but cannot be opened (locked by another process that is "
         "writing it, or truncated or damaged)");
  File file;
  file.h_ = std::move(f);
  file.file_ = path;
  file.path_ = "/";
  file.state_ = std::make_shared<detail::FileState>();
  if (file.has_attr(kChecksumsAttr)) {
    const std::string kind = file.attr_string(kChecksumsAttr);
    if (kind != "sha256")
      throw FormatError(
          fmt::format("{}: its root attribute {} is '{}'; this xentlab checks sha256 digests only",
                      path, kChecksumsAttr, kind));
    file.state_->checksums = true;
  }
  return file;
}

File File::create(const std::string& path) {
  silence();
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!f.valid()) fail_write(path, "cannot create the file");
  File file;
  file.h_ = std::move(f);
  file.file_ = path;
  file.path_ = "/";
  file.state_ = std::make_shared<detail::FileState>();
  file.set_attr(kChecksumsAttr, "sha256");
  file.state_->checksums = true;
  return file;
}

void File::set_compression(const Compression& c) {
  state_->compression = c;
}

bool File::declares_checksums() const {
  return state_->checksums;
}

void File::close() {
  silence();
  if (!h_.valid()) return;
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) fail_write(file(), "cannot flush the file");
  h_.reset();  // the data are on disk; objects still open keep the file open until they close
}

}  // namespace xentlab::h5
