// Shared by the binding files: array types and shape checks.
//
// Every bound function takes numpy arrays converted to C-contiguous float64 / bool /
// int64 (copied only when the input is not already in that form: inputs are never
// modified), checks their shapes (ValueError on a mismatch), allocates its outputs while
// holding the GIL and releases the GIL for the kernel.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace kai::bind {

namespace py = pybind11;

constexpr auto kIn = py::array::c_style | py::array::forcecast;
using F64 = py::array_t<double, kIn>;
using Bool = py::array_t<bool, kIn>;
using I64 = py::array_t<std::int64_t, kIn>;

template <typename Array>
void require_ndim(const Array& a, py::ssize_t ndim, const char* name) {
  if (a.ndim() != ndim) {
    throw py::value_error(std::string(name) + ": expected a " + std::to_string(ndim) +
                          "-d array, got " + std::to_string(a.ndim()) + "-d");
  }
}

template <typename Array>
std::size_t vector_len(const Array& a, const char* name) {
  require_ndim(a, 1, name);
  return static_cast<std::size_t>(a.shape(0));
}

template <typename Array>
void require_len(const Array& a, std::size_t n, const char* name) {
  if (vector_len(a, name) != n) {
    throw py::value_error(std::string(name) + ": expected length " + std::to_string(n) +
                          ", got " + std::to_string(a.shape(0)));
  }
}

}  // namespace kai::bind
