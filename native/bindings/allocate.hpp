// Registration of the allocate loop's binding (native/bindings/allocate.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace kai::alloc {

/// Adds ``allocate_loop`` to the extension module.
void register_bindings(pybind11::module_& m);

}  // namespace kai::alloc
