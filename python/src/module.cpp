// xentlab._xentlab: the lab's C++ libraries as a Python extension (nanobind). A thin layer: every
// function of python/src converts arrays and options and calls the library function the command
// line calls (reference/, datasets/, harness/verify/, harness/audit/); the Python package
// (python/xentlab) gives them their documented signatures. Errors keep the library's messages:
//   InputError  → xentlab.InputError  (a ValueError)     bad input, as `xentlab` exits 2
//   FormatError → xentlab.FormatError (a ValueError)     a file that is not what it claims
//   OutputError → xentlab.OutputError (an OSError)       an output that cannot be written
//   DeviceError → xentlab.DeviceError (a RuntimeError)
//   NoDeviceError → xentlab.NoDeviceError (a RuntimeError) no CUDA device, as `xentlab` exits 4
// An array of a dtype that is no float format of the lab, or not in host memory, is a TypeError.
//
// This file holds the module's table: its exceptions and the bindings of each part, defined in
// python/src/bind_*.cpp (arrays.cpp converts arrays; common.hpp is what they share).
#include <optional>
#include <string>
#include <utility>

#include "datasets/io/atomic_file.hpp"
#include "numerics/blas.hpp"
#include "numerics/error.hpp"
#include "numerics/no_device.hpp"
#include "numerics/version.hpp"
#include "python/src/common.hpp"
#include "reference/reference.hpp"

NB_MODULE(_xentlab, m) {
  using namespace xentlab;
  using namespace xentlab::python;
  m.doc() = "The xentlab C++ libraries (python/src/module.cpp); use the package xentlab.";
  m.attr("__version__") = kVersion;
  // Python's own SIGINT handler raises KeyboardInterrupt: the library must not replace it with
  // the command's (which ends the process); writes stay atomic (datasets/io/atomic_file.hpp).
  leave_signal_handlers_alone();

  nb::exception<InputError>(m, "InputError", PyExc_ValueError);
  nb::exception<FormatError>(m, "FormatError", PyExc_ValueError);
  nb::exception<OutputError>(m, "OutputError", PyExc_OSError);
  nb::exception<DeviceError>(m, "DeviceError", PyExc_RuntimeError);
  nb::exception<NoDeviceError>(m, "NoDeviceError", PyExc_RuntimeError);

  m.def("blas_description", [] { return std::string(blas_description()); });
  m.def("preferred_blas_coretype", []() -> std::optional<std::string> {
    const char* c = preferred_blas_coretype();
    return c ? std::optional<std::string>(c) : std::nullopt;
  });
  m.def("cuda_reference_available", [] {
    std::string why;
    const bool ok = cuda_reference_available(&why);
    return std::make_pair(ok, why);
  });

  bind_problem(m);
  bind_reference(m);
  bind_golden(m);
  bind_verify(m);
  bind_audit(m);
}
