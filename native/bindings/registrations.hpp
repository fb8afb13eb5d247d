// The binding files' registration functions, called by module.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace kai::bind {

namespace py = pybind11;

void register_fit(py::module_& m);
void register_score(py::module_& m);
void register_fairshare(py::module_& m);
void register_loadaware(py::module_& m);
void register_memory(py::module_& m);
void register_solver(py::module_& m);
void register_allocate(py::module_& m);

}  // namespace kai::bind
