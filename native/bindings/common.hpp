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
#include <unordered_map>

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

// A simulation's arrays are read by attribute, about fifty of them per call.  A name
// made afresh from a C string at each read is hashed again and misses the type's
// attribute cache (which takes interned names only); and casting to an array type with
// forcecast runs numpy's conversion machinery even on an array that needs none.

// The attribute ``name`` of ``o``, the name interned once (keyed by the literal's
// address: the GIL is held).
inline py::object attr(const py::handle& o, const char* name) {
  static std::unordered_map<const char*, PyObject*> interned;
  auto it = interned.find(name);
  if (it == interned.end()) {
    PyObject* key = PyUnicode_InternFromString(name);
    if (key == nullptr) throw py::error_already_set();
    it = interned.emplace(name, key).first;
  }
  PyObject* value = PyObject_GetAttr(o.ptr(), it->second);
  if (value == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

// ``h`` as the array type ``A``: itself when it already is one (C-contiguous, of A's
// dtype), else converted as a bound function's argument is.
template <typename A>
A as_array(const py::handle& h) {
  if (A::check_(h)) return py::reinterpret_borrow<A>(h);
  return py::cast<A>(h);
}

// The array attribute ``name`` of ``o`` (attr, as_array).
template <typename A>
A field(const py::handle& o, const char* name) {
  return as_array<A>(attr(o, name));
}

}  // namespace kai::bind
