// pybind11 module `kai._native`: registers the bindings of each part of the core.
//
// The binding files (native/bindings/<part>.cpp) check and convert the arrays (see
// common.hpp) and call the kernels of native/include/kai/<part>.hpp.
//
// Adding a kernel: declare it in native/include/kai/<area>.hpp, implement it in
// native/src/<area>.cpp (new files go into KAI_NATIVE_SOURCES in CMakeLists.txt), and bind
// it in native/bindings/<area>.cpp with the same Python signature as
// src/kai/backends/python_backend.py, and type it in src/kai/_native.pyi.
#include <pybind11/pybind11.h>

#include "kai/common.hpp"
#include "registrations.hpp"

#ifndef KAI_VERSION_INFO
#define KAI_VERSION_INFO "0.0.0+local"
#endif

PYBIND11_MODULE(_native, m) {
  m.doc() = "kai compiled core: scheduling kernels (see kai.backends for the Python API)";
  m.attr("__version__") = KAI_VERSION_INFO;
  m.attr("EPS") = kai::EPS;
  kai::bind::register_fit(m);
  kai::bind::register_score(m);
  kai::bind::register_fairshare(m);
  kai::bind::register_loadaware(m);
  kai::bind::register_memory(m);
  kai::bind::register_solver(m);
  kai::bind::register_allocate(m);  // the allocate action's fused loop
}
