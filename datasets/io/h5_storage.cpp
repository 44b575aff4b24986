// How datasets are stored (datasets/io/h5.hpp): the layout and filter checks behind
// Dataset::info, the digests (attribute sha256) written and checked on every read, chunked and
// compressed writing, and the walks over a group's datasets.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "datasets/io/h5.hpp"
#include "datasets/io/h5_detail.hpp"
#include "datasets/io/sha256.hpp"
#include "numerics/error.hpp"

// A digest covers the elements' little-endian bytes; the writer hashes its buffer as it is in
// memory, which is that only on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "datasets/io/h5_storage.cpp hashes native buffers as little-endian elements");

namespace xentlab::h5 {
namespace detail {

std::string digest_hex(const void* data, std::size_t n) {
  return sha256_hex(data, n);
}

Handle creation_plist(const Compression& c, const std::vector<hsize_t>& dims, std::size_t elem,
                      const std::string& where) {
  Handle p(H5Pcreate(H5P_DATASET_CREATE));
  std::uint64_t n = 1;
  for (hsize_t e : dims) n *= e;
  if (!c.enabled() || dims.empty() || n == 0) return p;  // contiguous
  if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0 || H5Zfilter_avail(H5Z_FILTER_SHUFFLE) <= 0)
    fail_write(where, "this HDF5 library has no deflate (gzip) or shuffle filter to compress with");
  // Chunks of at most 1 MiB (and at least one element): the trailing dimensions whole while they
  // fit, then as many steps of the next one as fit, leading dimensions one step each.
  constexpr std::uint64_t kChunkBytes = std::uint64_t{1} << 20;
  std::vector<hsize_t> chunk(dims.size(), 1);
  std::uint64_t inner = elem;  // bytes of one step of dimension k, the dimensions after it whole
  for (std::size_t k = dims.size(); k-- > 0;) {
    if (inner * dims[k] <= kChunkBytes) {
      chunk[k] = dims[k];
      inner *= dims[k];
      continue;
    }
    chunk[k] = std::max<hsize_t>(1, kChunkBytes / inner);
    break;
  }
  if (H5Pset_chunk(p.get(), static_cast<int>(chunk.size()), chunk.data()) < 0 ||
      H5Pset_shuffle(p.get()) < 0 ||
      H5Pset_deflate(p.get(), static_cast<unsigned>(c.gzip_level)) < 0)
    fail_write(where, "cannot set up chunked, compressed storage");
  return p;
}

}  // namespace detail

namespace {
using detail::fail;
using detail::silence;

std::string known_filter_name(H5Z_filter_t id) {
  switch (id) {
    case H5Z_FILTER_DEFLATE:
      return "deflate";
    case H5Z_FILTER_SHUFFLE:
      return "shuffle";
    case H5Z_FILTER_FLETCHER32:
      return "fletcher32";
    case H5Z_FILTER_SZIP:
      return "szip";
    case H5Z_FILTER_NBIT:
      return "nbit";
    case H5Z_FILTER_SCALEOFFSET:
      return "scaleoffset";
    case 32000:
      return "lzf";
    default:
      return fmt::format("filter {}", id);
  }
}

// The size of the file holding object id, for the checks that its data lie inside the file.
std::uint64_t file_size_of(hid_t id, const std::string& where) {
  Handle f(H5Iget_file_id(id));
  hsize_t size = 0;
  if (!f.valid() || H5Fget_filesize(f.get(), &size) < 0) fail(where, "cannot read the file's size");
  return size;
}

}  // namespace

Compression parse_compression(const std::string& text) {
  Compression c;
  if (text == "none") return c;
  if (text == "gzip") {
    c.gzip_level = 4;
    return c;
  }
  const std::string prefix = "gzip:";
  if (text.size() == prefix.size() + 1 && text.compare(0, prefix.size(), prefix) == 0 &&
      text.back() >= '1' && text.back() <= '9') {
    c.gzip_level = text.back() - '0';
    return c;
  }
  throw InputError(fmt::format(
      "--compress '{}': expected none, gzip (level 4) or gzip:LEVEL with LEVEL 1 to 9", text));
}

std::string Compression::describe() const {
  return enabled() ? fmt::format("gzip:{} with shuffle", gzip_level) : "none";
}

// ---------------------------------------------------------------- reading

void Dataset::check_storage(DatasetInfo& inf, std::uint64_t n) const {
  Handle dcpl(H5Dget_create_plist(id()));
  if (!dcpl.valid()) fail(where(), "cannot read the dataset's storage properties");
  // The filters first: a dataset compressed by a filter this library lacks (h5py's lzf) is
  // refused by name, not as damaged.
  const int nf = H5Pget_nfilters(dcpl.get());
  for (int k = 0; k < nf; ++k) {
    unsigned flags = 0, cd[16] = {}, config = 0;
    std::size_t ncd = 16;
    char name[128] = {};
    const H5Z_filter_t fid = H5Pget_filter2(dcpl.get(), static_cast<unsigned>(k), &flags, &ncd, cd,
                                            sizeof name, name, &config);
    if (fid < 0) fail(where(), "cannot read the dataset's filter pipeline");
    const std::string fname = name[0] != '\0' ? std::string(name) : known_filter_name(fid);
    inf.filters.push_back(fname);
    unsigned info = 0;
    const bool decodes = H5Zfilter_avail(fid) > 0 && H5Zget_filter_info(fid, &info) >= 0 &&
                         (info & H5Z_FILTER_CONFIG_DECODE_ENABLED) != 0;
    H5Eclear2(H5E_DEFAULT);
    if (!decodes)
      throw FormatError(fmt::format(
          "{}: stored through the HDF5 filter '{}' (id {}), which this HDF5 library cannot decode "
          "(filter not available){}",
          where(), fname, fid,
          fid == 32000 ? ": lzf is h5py's own compression; write the file again with "
                         "compression=\"gzip\" (or none), or put an lzf plugin on HDF5_PLUGIN_PATH"
                       : ": write the file again without it, or put its plugin on "
                         "HDF5_PLUGIN_PATH"));
  }
  if (H5Pget_external_count(dcpl.get()) > 0)
    throw FormatError(fmt::format(
        "{}: its data are stored in external files; xentlab reads data held in the file", where()));
  inf.stored_bytes = H5Dget_storage_size(id());
  if (n == 0) return;
  const std::uint64_t raw = n * static_cast<std::uint64_t>(inf.element_bytes);
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL)
    throw FormatError(fmt::format(
        "{}: a virtual dataset (its data live in other datasets); xentlab reads data held in the "
        "dataset",
        where()));
  if (layout != H5D_CHUNKED || nf == 0) {
    // Contiguous, compact or unfiltered chunks: every element stored, uncompressed.
    if (inf.stored_bytes < raw)
      fail(where(), fmt::format("declares {} elements of {} bytes but stores only {} bytes "
                                "(truncated, forged or partly written)",
                                n, inf.element_bytes, inf.stored_bytes));
  }
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t at = H5Dget_offset(id());
    const std::uint64_t size = file_size_of(id(), where());
    if (at == HADDR_UNDEF || at + raw > size)
      fail(where(), fmt::format("its {} bytes of data lie past the end of the file ({} bytes): "
                                "truncated",
                                raw, size));
  }
  if (layout != H5D_CHUNKED) return;
  // Chunked: every chunk written (one never written reads as the fill value) and inside the file.
  const std::size_t rank = inf.shape.size();
  std::vector<hsize_t> cdims(rank), count(rank), at(rank, 0);
  if (H5Pget_chunk(dcpl.get(), static_cast<int>(rank), cdims.data()) != static_cast<int>(rank))
    fail(where(), "cannot read the dataset's chunk shape");
  std::uint64_t total = 1, chunk_bytes = static_cast<std::uint64_t>(inf.element_bytes);
  for (std::size_t k = 0; k < rank; ++k) {
    const auto e = static_cast<hsize_t>(inf.shape[k]);
    count[k] = cdims[k] == 0 ? 0 : (e + cdims[k] - 1) / cdims[k];
    total *= count[k];
    chunk_bytes *= cdims[k];
  }
#if H5_VERSION_GE(1, 10, 5)
  hsize_t stored = 0;
  Handle space(H5Dget_space(id()));  // H5S_ALL is refused here by HDF5 1.10
  if (H5Dget_num_chunks(id(), space.get(), &stored) < 0)
    fail(where(), "cannot count the dataset's chunks");
  if (stored < total)
    fail(where(), fmt::format("stores {} of its {} chunks (partly written: a chunk never written "
                              "would read as the fill value)",
                              stored, total));
  const std::uint64_t size = file_size_of(id(), where());
  for (std::uint64_t q = 0; q < total; ++q) {
    std::vector<hsize_t> offset(rank);
    for (std::size_t k = 0; k < rank; ++k) offset[k] = at[k] * cdims[k];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t bytes = 0;
    if (H5Dget_chunk_info_by_coord(id(), offset.data(), &mask, &addr, &bytes) < 0)
      fail(where(), "cannot read the dataset's chunk index");
    std::string pos;
    for (std::size_t k = 0; k < rank; ++k) pos += fmt::format("{}{}", k ? ", " : "", offset[k]);
    if (addr == HADDR_UNDEF)
      fail(where(), fmt::format("its chunk at ({}) was never written (partly written: it would "
                                "read as the fill value)",
                                pos));
    if (addr + bytes > size || bytes == 0 || (nf == 0 && bytes != chunk_bytes))
      fail(where(), fmt::format("its chunk at ({}) of {} bytes at offset {} does not fit in the "
                                "file of {} bytes (truncated or damaged)",
                                pos, bytes, addr, size));
    for (std::size_t k = rank; k-- > 0;) {  // the next chunk, last dimension fastest
      if (++at[k] < count[k]) break;
      at[k] = 0;
    }
  }
#endif
}

void Dataset::read_checked(hid_t mem_type, void* dst, std::size_t n) const {
  silence();
  const char* failed = "cannot read the dataset (its stored bytes are truncated or damaged)";
  const bool has = has_attr(kDigestAttr);
  if (!has && state_->checksums)
    throw FormatError(fmt::format(
        "{}: carries no {} digest, though the file declares {}=sha256 for every dataset (a "
        "dataset added or replaced after the file was written?)",
        where(), kDigestAttr, kChecksumsAttr));
  if (!has) {
    if (n > 0 && H5Dread(id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
      fail(where(), failed);
    return;
  }
  const std::string want = attr_string(kDigestAttr);
  // The stored elements in little-endian order (the bytes the digest covers), then converted.
  Handle ft(H5Dget_type(id()));
  Handle le(H5Tcopy(ft.get()));
  if (!le.valid() || H5Tset_order(le.get(), H5T_ORDER_LE) < 0)
    fail(where(), "cannot form the little-endian type its digest covers");
  const std::size_t fsz = H5Tget_size(le.get()), msz = H5Tget_size(mem_type);
  std::string got;
  if (H5Tequal(le.get(), mem_type) > 0) {
    if (n > 0 && H5Dread(id(), le.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
      fail(where(), failed);
    got = detail::digest_hex(dst, n * fsz);
  } else {
    std::vector<unsigned char> buf(n * std::max(fsz, msz));
    if (n > 0 && H5Dread(id(), le.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
      fail(where(), failed);
    got = detail::digest_hex(buf.data(), n * fsz);
    if (n > 0 && H5Tconvert(le.get(), mem_type, n, buf.data(), nullptr, H5P_DEFAULT) < 0)
      fail(where(), "cannot convert the dataset's elements");
    std::memcpy(dst, buf.data(), n * msz);
  }
  if (got != want)
    throw FormatError(fmt::format(
        "{}: its data do not match its {} digest (stored {}…, computed {}…): the file was altered "
        "or damaged after it was written",
        where(), kDigestAttr, want.substr(0, 16), got.substr(0, 16)));
  state_->verified.insert(path());
}

void Dataset::verify_digest() const {
  silence();
  if (state_->verified.count(path()) != 0) return;
  const bool has = has_attr(kDigestAttr);
  if (!has && !state_->checksums) return;
  const DatasetInfo inf = info();
  if (inf.kind == DatasetInfo::Kind::other)
    throw FormatError(
        fmt::format("{}: holds {}; digests cover numeric datasets only", where(), inf.describe()));
  Handle ft(H5Dget_type(id()));
  Handle le(H5Tcopy(ft.get()));
  H5Tset_order(le.get(), H5T_ORDER_LE);
  const auto n = static_cast<std::size_t>(inf.numel());
  std::vector<unsigned char> buf(n * H5Tget_size(le.get()));
  read_checked(le.get(), buf.data(), n);
}

// ---------------------------------------------------------------- walks

namespace {

// The identity of an HDF5 object within its file (its address; a token from HDF5 1.12 on): a walk
// that meets an object twice (a second hard link to it, or a link back up that would loop) can
// tell.
std::string object_identity(hid_t obj) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  if (H5Oget_info3(obj, &info, H5O_INFO_BASIC) < 0) return {};
  return std::string(reinterpret_cast<const char*>(&info.token), sizeof info.token);
#else
  H5O_info_t info;
  if (H5Oget_info2(obj, &info, H5O_INFO_BASIC) < 0) return {};
  return std::to_string(info.addr);
#endif
}

// The links of a group in name order, with their kinds (hard, soft, external, other).
std::vector<std::pair<std::string, H5L_type_t>> links_of(hid_t group) {
  std::vector<std::pair<std::string, H5L_type_t>> links;
  H5Literate(
      group, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* n, const H5L_info_t* info, void* data) -> herr_t {
        static_cast<std::vector<std::pair<std::string, H5L_type_t>>*>(data)->emplace_back(
            n, info->type);
        return 0;
      },
      &links);
  return links;
}

}  // namespace

void Group::for_each_dataset(const std::function<void(const Dataset&)>& f) const {
  std::set<std::string> seen{object_identity(id())};
  for_each_dataset(f, seen);
}

void Group::for_each_dataset(const std::function<void(const Dataset&)>& f,
                             std::set<std::string>& seen) const {
  silence();
  for (const auto& [name, type] : links_of(id())) {
    if (type != H5L_TYPE_HARD) continue;
    Handle o(H5Oopen(id(), name.c_str(), H5P_DEFAULT));
    if (!o.valid()) fail(where(), fmt::format("cannot open '{}'", name));
    // Each object once: a second hard link to it, or one back up to a group above (a loop that
    // would recurse without end), is not walked again.
    if (!seen.insert(object_identity(o.get())).second) continue;
    const H5I_type_t t = H5Iget_type(o.get());
    if (t == H5I_DATASET)
      f(Dataset(std::move(o), file(), detail::join(path(), name), state_));
    else if (t == H5I_GROUP)
      Group(std::move(o), file(), detail::join(path(), name), state_).for_each_dataset(f, seen);
  }
}

StorageTotals Group::storage_totals() const {
  StorageTotals t;
  for_each_dataset([&](const Dataset& d) {
    const DatasetInfo inf = d.info();
    t.raw_bytes +=
        static_cast<std::uint64_t>(inf.numel()) * static_cast<std::uint64_t>(inf.element_bytes);
    t.stored_bytes += inf.stored_bytes;
    ++t.datasets;
  });
  return t;
}

void Group::verify_digests() const {
  for_each_dataset([](const Dataset& d) { d.verify_digest(); });
}

namespace {

// Text that cannot span or fake a line of the manifest: backslash, control characters and '"'
// escaped (\\, \n, \t, \xNN, \").
std::string escaped(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\' || c == '"')
      out += std::string("\\") + ch;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out;
}

// "attribute PATH@NAME=VALUE" lines of an object's attributes, in name order (the root's manifest
// left out): strings quoted and escaped, integers exactly, floating point with 17 significant
// digits, other types (arrays, compounds) by their type class and size.
void attribute_lines(const Object& o, bool root, std::vector<std::string>& out) {
  std::vector<std::string> names;
  H5Aiterate2(
      o.id(), H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* n, const H5A_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->emplace_back(n);
        return 0;
      },
      &names);
  for (const std::string& n : names) {
    // The root's manifest is not part of itself; a dataset's digest is on its own line.
    if ((root && n == kManifestAttr) || (!root && n == kDigestAttr)) continue;
    std::string value;
    Handle a(H5Aopen(o.id(), n.c_str(), H5P_DEFAULT));
    Handle t(a.valid() ? H5Aget_type(a.get()) : H5I_INVALID_HID);
    Handle sp(a.valid() ? H5Aget_space(a.get()) : H5I_INVALID_HID);
    const H5T_class_t cls = t.valid() ? H5Tget_class(t.get()) : H5T_NO_CLASS;
    const hssize_t count = sp.valid() ? H5Sget_simple_extent_npoints(sp.get()) : -1;
    try {
      if (count == 1 && cls == H5T_STRING)
        value = '"' + escaped(o.attr_string(n)) + '"';
      else if (count == 1 && cls == H5T_INTEGER)
        value = std::to_string(o.attr_int(n));
      else if (count == 1 && cls == H5T_FLOAT)
        value = fmt::format("{:.17g}", o.attr_double(n));
      else
        value = fmt::format("(class {}, {} elements of {} bytes)", static_cast<int>(cls), count,
                            t.valid() ? H5Tget_size(t.get()) : 0);
    } catch (const FormatError&) {
      value = fmt::format("(unreadable, class {})", static_cast<int>(cls));
    }
    out.push_back(fmt::format("attribute {}@{}={}", escaped(o.path()), escaped(n), value));
  }
}

}  // namespace

void Group::manifest_lines(std::vector<std::string>& out, std::set<std::string>& seen) const {
  silence();
  attribute_lines(*this, path() == "/", out);
  for (const auto& [name, type] : links_of(id())) {
    const std::string p = detail::join(path(), name);
    // A link that is not a hard link (soft, external) is listed as such, so that one added after
    // writing (xentlab writes none) is refused, never followed unseen.
    if (type == H5L_TYPE_SOFT || type == H5L_TYPE_EXTERNAL) {
      out.push_back(
          fmt::format("{} {}", type == H5L_TYPE_SOFT ? "softlink" : "extlink", escaped(p)));
      continue;
    }
    if (type != H5L_TYPE_HARD) {
      out.push_back("link " + escaped(p));
      continue;
    }
    Handle o(H5Oopen(id(), name.c_str(), H5P_DEFAULT));
    if (!o.valid()) fail(where(), fmt::format("cannot open '{}'", name));
    if (!seen.insert(object_identity(o.get())).second) {
      out.push_back("hardlink " + escaped(p) + " to an object listed before");
      continue;
    }
    if (H5Iget_type(o.get()) == H5I_DATASET) {
      const Dataset d(std::move(o), file(), p, state_);
      // The stored type and shape beside the digest: the digest covers the bytes, and the same
      // bytes declared as another type are other values.
      const DatasetInfo inf = d.info();
      std::string shape;
      for (std::size_t k = 0; k < inf.shape.size(); ++k)
        shape += fmt::format("{}{}", k ? "," : "", inf.shape[k]);
      const char* kind = inf.kind == DatasetInfo::Kind::floating  ? "float"
                         : inf.kind == DatasetInfo::Kind::integer ? (inf.is_signed ? "int" : "uint")
                                                                  : "other";
      out.push_back(fmt::format(
          "dataset {} {}{} ({}) sha256={}", escaped(p), kind, 8 * inf.element_bytes, shape,
          d.has_attr(kDigestAttr) ? escaped(d.attr_string(kDigestAttr)) : "none"));
      attribute_lines(d, false, out);
    } else if (H5Iget_type(o.get()) == H5I_GROUP) {
      out.push_back("group " + escaped(p));
      Group(std::move(o), file(), p, state_).manifest_lines(out, seen);
    }
  }
}

std::string Group::manifest() const {
  std::vector<std::string> lines{kManifestHeader};
  std::set<std::string> seen{object_identity(id())};
  manifest_lines(lines, seen);
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

void File::write_manifest() {
  set_attr(kManifestAttr, manifest());
}

void File::verify_manifest() const {
  if (!has_manifest()) return;
  const auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::size_t b = 0;
    for (std::size_t e; (e = s.find('\n', b)) != std::string::npos; b = e + 1)
      v.push_back(s.substr(b, e - b));
    if (b < s.size()) v.push_back(s.substr(b));
    return v;
  };
  const std::vector<std::string> was = split(attr_string(kManifestAttr)), now = split(manifest());
  if (was == now) return;
  // The lines of each side the other lacks, in file order (objects before their attributes).
  const auto missing_from = [](const std::vector<std::string>& a,
                               const std::vector<std::string>& b) {
    const std::set<std::string> in_b(b.begin(), b.end());
    std::vector<std::string> out;
    for (const std::string& l : a)
      if (in_b.count(l) == 0) out.push_back(l);
    return out;
  };
  const std::vector<std::string> gone = missing_from(was, now), added = missing_from(now, was);
  if (was.empty() || was.front() != kManifestHeader)
    throw FormatError(fmt::format(
        "{}: its manifest attribute does not start with '{}' (written by another program or "
        "version, or edited)",
        file(), kManifestHeader));
  std::string what;
  const auto list = [&](const char* head, const std::vector<std::string>& v) {
    if (v.empty()) return;
    what += fmt::format("{}{} ", what.empty() ? "" : "; ", head);
    for (std::size_t i = 0; i < v.size() && i < 3; ++i) {
      // A line as it is shown: an empty one named, a long one cut (a manifest can be any size).
      const std::string& l = v[i];
      what += (i ? ", " : "") + (l.empty()        ? std::string("(an empty line)")
                                 : l.size() > 200 ? l.substr(0, 200) + "… (" +
                                                        std::to_string(l.size()) + " characters)"
                                                  : l);
    }
    if (v.size() > 3) what += fmt::format(" and {} more", v.size() - 3);
  };
  list("as written:", gone);
  list("now:", added);
  if (what.empty()) what = "the same objects and attributes, reordered or repeated";
  throw FormatError(
      fmt::format("{}: the file was changed after it was written (its objects or attributes differ "
                  "from the manifest stored with it): {}",
                  file(), what));
}

}  // namespace xentlab::h5
