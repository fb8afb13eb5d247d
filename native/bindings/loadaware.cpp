// Bindings of the load-aware kernels (kai/loadaware.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kai/loadaware.hpp"
#include "common.hpp"
#include "registrations.hpp"

namespace kai::bind {
namespace {

void require_matrix(const I64& a, std::size_t n, std::size_t r, const char* name) {
  require_ndim(a, 2, name);
  if (static_cast<std::size_t>(a.shape(0)) != n || static_cast<std::size_t>(a.shape(1)) != r) {
    throw py::value_error(std::string(name) + ": expected shape (" + std::to_string(n) + ", " +
                          std::to_string(r) + ")");
  }
}

py::tuple loadaware_filter(const I64& existing, const I64& incoming, const I64& allocatable,
                           const I64& thresholds, const I64& state) {
  const std::size_t r = vector_len(incoming, "incoming");
  require_ndim(existing, 2, "existing");
  const auto n = static_cast<std::size_t>(existing.shape(0));
  require_matrix(existing, n, r, "existing");
  require_matrix(allocatable, n, r, "allocatable");
  require_matrix(thresholds, n, r, "thresholds");
  require_len(state, n, "state");
  py::array_t<bool> mask(static_cast<py::ssize_t>(n));
  py::array_t<std::int64_t> code(static_cast<py::ssize_t>(n));
  const std::int64_t* ex = existing.data();
  const std::int64_t* inc = incoming.data();
  const std::int64_t* al = allocatable.data();
  const std::int64_t* th = thresholds.data();
  const std::int64_t* st = state.data();
  bool* m = mask.mutable_data();
  std::int64_t* c = code.mutable_data();
  {
    py::gil_scoped_release nogil;
    kai::loadaware::filter(ex, inc, al, th, st, n, r, m, c);
  }
  return py::make_tuple(mask, code);
}

py::array_t<std::int64_t> loadaware_score(const I64& existing, const I64& incoming,
                                          const I64& allocatable, const I64& weights,
                                          std::int64_t dominant_weight, const Bool& valid) {
  const std::size_t r = vector_len(incoming, "incoming");
  require_ndim(existing, 2, "existing");
  const auto n = static_cast<std::size_t>(existing.shape(0));
  require_matrix(existing, n, r, "existing");
  require_matrix(allocatable, n, r, "allocatable");
  require_len(weights, r, "weights");
  require_len(valid, n, "valid");
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(n));
  const std::int64_t* ex = existing.data();
  const std::int64_t* inc = incoming.data();
  const std::int64_t* al = allocatable.data();
  const std::int64_t* w = weights.data();
  const bool* v = valid.data();
  std::int64_t* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    kai::loadaware::score(ex, inc, al, w, dominant_weight, v, n, r, o);
  }
  return out;
}

}  // namespace

void register_loadaware(py::module_& m) {
  m.def("loadaware_filter", &loadaware_filter, py::arg("existing"), py::arg("incoming"),
        py::arg("allocatable"), py::arg("thresholds"), py::arg("state"),
        "Koordinator load-aware usage-threshold filter: (mask, first failing resource).");
  m.def("loadaware_score", &loadaware_score, py::arg("existing"), py::arg("incoming"),
        py::arg("allocatable"), py::arg("weights"), py::arg("dominant_weight"),
        py::arg("valid"), "Koordinator load-aware least-used score (0..100) per node.");
}

}  // namespace kai::bind
