// write_candidate (harness/verify/verify.hpp): the candidate format of docs/formats.md.
#include <fmt/format.h>

#include "datasets/io/atomic_file.hpp"
#include "datasets/io/h5.hpp"
#include "harness/verify/verify.hpp"
#include "numerics/version.hpp"

namespace xentlab {

void write_candidate(const std::string& path, bool force,
                     const std::vector<std::pair<std::string, Tensor>>& outputs,
                     const std::string& implementation) {
  AtomicOutput out(path, force);
  h5::File f = h5::File::create(out.temp_path());
  f.set_attr("format", kCandidateFormat);
  f.set_attr("format_version", kCandidateVersion);
  f.set_attr("implementation", implementation);
  for (const auto& [name, t] : outputs) f.write_tensor(name, t);
  f.close();
  out.commit();
}
}  // namespace xentlab
