// SHA-256 through OpenSSL's EVP interface (libcrypto), which uses the CPU's SHA extensions where
// present: measured 1.6–1.8 GB/s against 0.19 GB/s of the portable C++ implementation it replaced,
// on the same core (lab/notebook), the difference between seconds and a minute for the 10 GB of a
// golden file of the Llama-3-8B head.
#include "datasets/io/sha256.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

#include "numerics/error.hpp"

namespace xentlab {
namespace {

// An EVP digest context for SHA-256, freed at scope exit.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("OpenSSL: cannot initialise a SHA-256 digest");
  }
  void update(const void* data, std::size_t n) {
    if (n > 0 && EVP_DigestUpdate(ctx_.get(), data, n) != 1)
      throw std::runtime_error("OpenSSL: SHA-256 update failed");
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1 || len != 32)
      throw std::runtime_error("OpenSSL: SHA-256 final failed");
    std::string out;
    out.reserve(64);
    for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::string sha256_hex(const void* data, std::size_t n) {
  Sha256 s;
  s.update(data, n);
  return s.hex();
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open to compute its SHA-256", path));
  Sha256 s;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    s.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw InputError(fmt::format("{}: read error while computing its SHA-256", path));
  return s.hex();
}

}  // namespace xentlab
