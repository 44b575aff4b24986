#pragma once
// Subcommands of the xentlab program. One file per subcommand under tools/cli/, each with one
// explicit registration function called from tools/xentlab.cpp (no static self-registration).
#include <CLI/CLI.hpp>

namespace xentlab::cli {

/// `xentlab reference`: the certified reference on the embedded example or a generated problem.
void register_reference(CLI::App& app);

}  // namespace xentlab::cli
