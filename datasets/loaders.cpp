#include "datasets/loaders.hpp"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "datasets/io/h5.hpp"
#include "numerics/error.hpp"

namespace xentlab {
namespace fs = std::filesystem;
namespace {

// Element count of a declared shape; FormatError for a negative extent or a count past 2^48
// (no file of this lab is that large: a forged or corrupt header, not data).
std::int64_t numel_of(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (auto e : s) {
    if (e < 0) throw FormatError(fmt::format("declared shape has a negative extent {}", e));
    if (e > 0 && n > (std::int64_t{1} << 48) / e)
      throw FormatError("declared shape has more than 2^48 elements (corrupt or forged header)");
    n *= e;
  }
  return n;
}

// Element kinds shared by .npy and safetensors.
struct Elem {
  bool is_int = false, is_signed = true;
  int bytes = 0;
  DType dtype = DType::fp32;  // floats
};

// Fills a LoadedArray from raw little-endian bytes.
LoadedArray from_bytes(const std::string& name, const std::vector<std::int64_t>& shape,
                       const Elem& e, const char* p) {
  LoadedArray a;
  a.name = name;
  a.shape = shape;
  const std::int64_t n = numel_of(shape);
  if (!e.is_int) {
    a.floats = Tensor(e.dtype, shape, name);
    std::memcpy(a.floats.data(), p, static_cast<std::size_t>(n) * e.bytes);
    return a;
  }
  a.is_integer = true;
  a.ints.resize(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) {
    const char* q = p + k * e.bytes;
    std::int64_t v = 0;
    switch (e.bytes) {
      case 1:
        v = e.is_signed ? std::int64_t{static_cast<std::int8_t>(*q)}
                        : std::int64_t{static_cast<std::uint8_t>(*q)};
        break;
      case 2: {
        std::int16_t s;
        std::uint16_t u;
        std::memcpy(&s, q, 2);
        std::memcpy(&u, q, 2);
        v = e.is_signed ? s : u;
        break;
      }
      case 4: {
        std::int32_t s;
        std::uint32_t u;
        std::memcpy(&s, q, 4);
        std::memcpy(&u, q, 4);
        v = e.is_signed ? std::int64_t{s} : std::int64_t{u};
        break;
      }
      case 8:
        std::memcpy(&v, q, 8);
        break;
    }
    a.ints[static_cast<std::size_t>(k)] = v;
  }
  return a;
}

std::vector<char> read_all(const std::string& path) {
  // A directory, a FIFO or a device (/dev/zero) is no file of arrays: refused by name before any
  // read (a FIFO would block, /dev/zero never end).
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!ec && fs::is_directory(st))
    throw FormatError(fmt::format("{}: is a directory, not a file of arrays", path));
  if (!ec && fs::exists(st) && !fs::is_regular_file(st))
    throw FormatError(fmt::format("{}: is not a regular file (a FIFO, socket or device)", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot open", path));
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// Builds the problem from named arrays (H, W, targets, bias, or logits, targets).
Problem assemble(std::map<std::string, LoadedArray> arrays, const std::string& path,
                 std::int64_t ignore_index) {
  auto take = [&](const char* n, bool want_int) -> LoadedArray {
    auto it = arrays.find(n);
    if (it == arrays.end())
      throw FormatError(
          fmt::format("{}: no tensor named '{}' (a problem file holds H, W, targets "
                      "[, bias] or logits, targets)",
                      path, n));
    if (it->second.is_integer != want_int)
      throw InputError(fmt::format("{}: tensor '{}' must hold {}", path, n,
                                   want_int ? "integers (targets)" : "floating-point values"));
    return std::move(it->second);
  };
  auto flatten = [&](LoadedArray& a, const char* n) {
    if (a.shape.size() < 2)
      throw InputError(fmt::format("{}: tensor '{}' must have rank >= 2, got shape of rank {}",
                                   path, n, a.shape.size()));
    if (a.shape.size() == 2 && a.floats.rank() == 2) return;  // already (rows, last): no copy
    const std::int64_t last = a.shape.back();
    const std::int64_t rows = numel_of(a.shape) / std::max<std::int64_t>(last, 1);
    Tensor t(a.floats.dtype(), {rows, last}, n);
    std::memcpy(t.data(), a.floats.data(), a.floats.nbytes());
    a.floats = std::move(t);
  };
  LoadedArray t = take("targets", true);
  if (arrays.count("logits")) {
    // Logits beside H, W or a bias: two problems, or logits whose bias would be dropped.
    std::string others;
    for (const char* n : {"H", "W", "bias"})
      if (arrays.count(n)) others += fmt::format("{}{}", others.empty() ? "" : ", ", n);
    if (!others.empty())
      throw InputError(fmt::format(
          "{}: holds logits and {}: a problem is given logits (logits, targets) or a linear head "
          "(H, W, targets[, bias]), not both (a bias is not added to given logits); keep one",
          path, others));
    LoadedArray z = take("logits", false);
    flatten(z, "logits");
    return Problem::from_logits(std::move(z.floats), std::move(t.ints), ignore_index,
                                fs::path(path).filename().string());
  }
  LoadedArray H = take("H", false), W = take("W", false);
  for (const LoadedArray* a : {&H, &W})
    if (a->floats.dtype() == DType::fp64)
      throw InputError(
          fmt::format("{}: {} is float64; store H and W in float32, float16 or bf16 "
                      "(products of those are exact in double, which the reference needs)",
                      path, a->name));
  flatten(H, "H");
  if (W.shape.size() != 2)
    throw InputError(fmt::format("{}: W must be 2-D (V, D), got rank {}", path, W.shape.size()));
  std::optional<Tensor> bias;
  if (arrays.count("bias")) bias = take("bias", false).floats;
  return Problem::linear(std::move(H.floats), std::move(W.floats), std::move(bias),
                         std::move(t.ints), ignore_index, fs::path(path).filename().string());
}

Elem npy_elem(const std::string& descr, const std::string& path) {
  static const std::map<std::string, Elem> known = {{"<f2", {false, true, 2, DType::fp16}},
                                                    {"<f4", {false, true, 4, DType::fp32}},
                                                    {"<f8", {false, true, 8, DType::fp64}},
                                                    {"|i1", {true, true, 1}},
                                                    {"|u1", {true, false, 1}},
                                                    {"<i2", {true, true, 2}},
                                                    {"<u2", {true, false, 2}},
                                                    {"<i4", {true, true, 4}},
                                                    {"<u4", {true, false, 4}},
                                                    {"<i8", {true, true, 8}}};
  const auto it = known.find(descr);
  if (it == known.end())
    throw FormatError(
        fmt::format("{}: dtype descr '{}' is not supported (little-endian float16/32/64 "
                    "or integers; store bf16 as float32, which is exact)",
                    path, descr));
  return it->second;
}

}  // namespace

LoadedArray read_npy(const std::string& path) {
  static const char magic[] = "\x93NUMPY";
  {
    // The magic first: a large file of something else is refused without reading it whole.
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
      std::ifstream in(path, std::ios::binary);
      char head[6] = {};
      if (in && (!in.read(head, 6) || std::memcmp(head, magic, 6) != 0))
        throw FormatError(fmt::format("{}: not a .npy file (bad magic)", path));
    }
  }
  const std::vector<char> b = read_all(path);
  if (b.size() < 10 || std::memcmp(b.data(), magic, 6) != 0)
    throw FormatError(fmt::format("{}: not a .npy file (bad magic)", path));
  const int major = static_cast<unsigned char>(b[6]);
  std::size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(b[8]) |
           (static_cast<std::size_t>(static_cast<unsigned char>(b[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw FormatError(fmt::format("{}: truncated .npy header", path));
    std::uint32_t l;
    std::memcpy(&l, b.data() + 8, 4);
    hlen = l;
    hstart = 12;
  } else {
    throw FormatError(
        fmt::format("{}: .npy format version {} is not supported (1, 2, 3 are)", path, major));
  }
  if (b.size() < hstart + hlen) throw FormatError(fmt::format("{}: truncated .npy header", path));
  const std::string h(b.data() + hstart, hlen);
  // {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } — numpy.lib.format writes exactly
  // these three keys as a Python dict literal.
  std::smatch m;
  if (!std::regex_search(h, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw FormatError(fmt::format("{}: .npy header has no 'descr': {}", path, h));
  const std::string descr = m[1];
  if (!std::regex_search(h, m, std::regex(R"('fortran_order'\s*:\s*(True|False))")))
    throw FormatError(fmt::format("{}: .npy header has no 'fortran_order': {}", path, h));
  if (m[1] == "True")
    throw FormatError(
        fmt::format("{}: Fortran-ordered arrays are not supported (save with "
                    "np.ascontiguousarray)",
                    path));
  if (!std::regex_search(h, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw FormatError(fmt::format("{}: .npy header has no 'shape': {}", path, h));
  std::vector<std::int64_t> shape;
  const std::string dims = m[1];
  const std::regex digits(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), digits), end; it != end; ++it) {
    if (it->str().size() > 15)
      throw FormatError(fmt::format("{}: .npy shape extent {} is absurd", path, it->str()));
    shape.push_back(std::stoll(it->str()));
  }
  const Elem e = npy_elem(descr, path);
  const std::size_t need = static_cast<std::size_t>(numel_of(shape)) * e.bytes;
  if (b.size() - hstart - hlen != need)
    throw FormatError(
        fmt::format("{}: holds {} data bytes but its header ({} {}) needs {} "
                    "(truncated or damaged)",
                    path, b.size() - hstart - hlen, descr, dims, need));
  return from_bytes(fs::path(path).stem().string(), shape, e, b.data() + hstart + hlen);
}

std::vector<LoadedArray> read_safetensors(const std::string& path) {
  const std::vector<char> b = read_all(path);
  if (b.size() < 8) throw FormatError(fmt::format("{}: too short for a safetensors file", path));
  std::uint64_t n;
  std::memcpy(&n, b.data(), 8);
  if (n > b.size() - 8)
    throw FormatError(
        fmt::format("{}: header length {} exceeds the file (truncated or not "
                    "safetensors)",
                    path, n));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const nlohmann::json::exception& ex) {
    throw FormatError(fmt::format("{}: the safetensors header is not JSON: {}", path, ex.what()));
  }
  if (!j.is_object())
    throw FormatError(fmt::format("{}: the safetensors header is not an object", path));
  static const std::map<std::string, Elem> known = {{"F16", {false, true, 2, DType::fp16}},
                                                    {"BF16", {false, true, 2, DType::bf16}},
                                                    {"F32", {false, true, 4, DType::fp32}},
                                                    {"F64", {false, true, 8, DType::fp64}},
                                                    {"I8", {true, true, 1}},
                                                    {"U8", {true, false, 1}},
                                                    {"I16", {true, true, 2}},
                                                    {"I32", {true, true, 4}},
                                                    {"I64", {true, true, 8}}};
  const std::size_t data0 = 8 + n, data_len = b.size() - data0;
  std::vector<LoadedArray> out;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") continue;
    try {
      const std::string dt = v.at("dtype").get<std::string>();
      const auto it = known.find(dt);
      if (it == known.end())
        throw FormatError(
            fmt::format("{}: tensor '{}' has dtype {}, not supported", path, name, dt));
      const auto shape = v.at("shape").get<std::vector<std::int64_t>>();
      const auto off = v.at("data_offsets").get<std::vector<std::uint64_t>>();
      for (auto e : shape)
        if (e < 0)
          throw FormatError(fmt::format("{}: tensor '{}' has a negative extent", path, name));
      if (off.size() != 2 || off[0] > off[1] || off[1] > data_len ||
          off[1] - off[0] != static_cast<std::uint64_t>(numel_of(shape)) * it->second.bytes)
        throw FormatError(
            fmt::format("{}: tensor '{}' has data_offsets inconsistent with its shape "
                        "and dtype, or past the end of the file (truncated?)",
                        path, name));
      out.push_back(from_bytes(name, shape, it->second, b.data() + data0 + off[0]));
    } catch (const nlohmann::json::exception& ex) {
      throw FormatError(
          fmt::format("{}: tensor '{}': malformed header entry: {}", path, name, ex.what()));
    }
  }
  return out;
}

LoadedProblem load_problem_file(const std::string& path, std::int64_t ignore_index) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw InputError(fmt::format("{}: no such file or folder", path));
  std::map<std::string, LoadedArray> arrays;
  std::string format;
  if (fs::is_directory(path, ec)) {
    format = "npy";
    for (const char* n : {"H", "W", "targets", "bias", "logits"}) {
      const fs::path f = fs::path(path) / (std::string(n) + ".npy");
      if (fs::exists(f, ec)) arrays[n] = read_npy(f.string());
    }
    if (arrays.empty())
      throw FormatError(
          fmt::format("{}: a folder problem needs H.npy, W.npy, targets.npy (or "
                      "logits.npy, targets.npy)",
                      path));
  } else {
    const std::string ext = fs::path(path).extension().string();
    if (ext == ".safetensors") {
      format = "safetensors";
      for (auto& a : read_safetensors(path)) arrays[a.name] = std::move(a);
    } else if (ext == ".npy") {
      throw FormatError(
          fmt::format("{}: a single .npy holds one array; pass the folder holding "
                      "H.npy, W.npy and targets.npy",
                      path));
    } else {
      format = "hdf5";
      const h5::File f = h5::File::open_read(path);
      const h5::Group g = f.exists("problem") ? f.open_group("problem") : f.open_group("/");
      for (const char* n : {"H", "W", "targets", "bias", "logits"}) {
        if (!g.exists(n)) continue;
        const h5::Dataset d = g.open_dataset(n);
        const h5::DatasetInfo inf = d.info();
        LoadedArray a;
        a.name = n;
        a.shape = inf.shape;
        if (inf.kind == h5::DatasetInfo::Kind::integer && inf.dtype_attr.empty()) {
          a.is_integer = true;
          a.ints = d.read_int64();
        } else {
          a.floats = d.read_tensor();
        }
        arrays[n] = std::move(a);
      }
    }
  }
  return {assemble(std::move(arrays), path, ignore_index), format};
}

}  // namespace xentlab
