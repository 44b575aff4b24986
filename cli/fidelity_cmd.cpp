// `xentlab fidelity EMULATION.h5 DEVICE.h5`: does the CPU emulation model the device? Compares a
// CPU-emulation audit with a GPU audit of the same problems run by run (harness/audit/regress.cpp,
// compare_backends) and exits 1 when an output's errors disagree beyond the factor.
#include <fmt/core.h>

#include <memory>

#include "cli/commands.hpp"
#include "harness/audit/audit.hpp"

namespace xentlab::cli {

void register_fidelity(CLI::App& app) {
  struct Args {
    std::string model, device;
    double factor = 2.0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand(
      "fidelity",
      "Compare a CPU-emulation audit with a device audit of the same set run by run: per "
      "strategy and output, device error / emulation error; exit 1 when an output disagrees "
      "beyond --factor (above a rounding floor of 8 units of the output dtype)");
  c->add_option("emulation", a->model,
                "results file of the CPU emulation (xentlab audit --backend cpu)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("device", a->device, "results file of the device (xentlab audit --backend cuda)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--factor", a->factor, "largest accepted ratio either way")
      ->default_val(2.0)
      ->check(in_range(1.0, 1e6));
  c->callback([a]() {
    const audit::FidelityReport rep = audit::compare_backends(a->model, a->device, a->factor);
    fmt::print("model {} ({}), device {} ({})\n", rep.model_backend, a->model, rep.device_backend,
               a->device);
    fmt::print("{:<13} {:<8} {:>5} {:>10} {:>10} {:>10}\n", "strategy", "output", "n", "median",
               "min", "max");
    for (const auto& r : rep.rows)
      fmt::print("{:<13} {:<8} {:>5} {:>10.3g} {:>10.3g} {:>10.3g}\n", r.strategy, r.output, r.n,
                 r.median, r.min, r.max);
    for (const auto& l : rep.disagreements) fmt::print("{}\n", l);
    fmt::print(
        "{} run pairs passed on both backends, {} outputs compared; {} pairs with a run not "
        "supported on one side; {} device runs and {} emulation runs without a partner: {} "
        "disagreement(s) beyond {:g}x\n",
        rep.matched, rep.outputs, rep.not_supported, rep.device_only, rep.model_only,
        rep.disagreements.size(), a->factor);
    if (!rep.disagreements.empty()) throw CLI::RuntimeError(1);
  });
}

}  // namespace xentlab::cli
