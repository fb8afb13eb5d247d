// Bindings of node scoring and selection (kai/score.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kai/common.hpp"
#include "kai/score.hpp"
#include "common.hpp"
#include "registrations.hpp"

namespace kai::bind {
namespace {

py::array_t<double> binpack_score(const F64& non_allocated, const F64& allocatable,
                                  const Bool& candidates, double max_score) {
  const std::size_t n = vector_len(non_allocated, "non_allocated");
  require_len(allocatable, n, "allocatable");
  require_len(candidates, n, "candidates");
  py::array_t<double> out(static_cast<py::ssize_t>(n));
  const double* na = non_allocated.data();
  const double* al = allocatable.data();
  const bool* ca = candidates.data();
  double* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    kai::score::binpack_score(na, al, ca, n, max_score, o);
  }
  return out;
}

py::array_t<double> spread_score(const F64& non_allocated, const F64& capacity) {
  const std::size_t n = vector_len(non_allocated, "non_allocated");
  require_len(capacity, n, "capacity");
  py::array_t<double> out(static_cast<py::ssize_t>(n));
  const double* na = non_allocated.data();
  const double* ca = capacity.data();
  double* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    kai::score::spread_score(na, ca, n, o);
  }
  return out;
}

kai::index_t best_node(const F64& scores, const Bool& mask) {
  const std::size_t n = vector_len(scores, "scores");
  require_len(mask, n, "mask");
  const double* s = scores.data();
  const bool* m = mask.data();
  py::gil_scoped_release nogil;
  return kai::score::best_node(s, m, n);
}

py::array_t<std::int64_t> ordered_nodes(const F64& scores, const Bool& mask) {
  const std::size_t n = vector_len(scores, "scores");
  require_len(mask, n, "mask");
  const double* s = scores.data();
  const bool* m = mask.data();
  std::vector<kai::index_t> order;
  {
    py::gil_scoped_release nogil;
    order = kai::score::ordered_nodes(s, m, n);
  }
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(order.size()));
  std::copy(order.begin(), order.end(), out.mutable_data());
  return out;
}

}  // namespace

void register_score(py::module_& m) {
  m.def("binpack_score", &binpack_score, py::arg("non_allocated"), py::arg("allocatable"),
        py::arg("candidates"), py::arg("max_score"),
        "KAI binpack node-placement score (0..max_score).");
  m.def("spread_score", &spread_score, py::arg("non_allocated"), py::arg("capacity"),
        "non_allocated / capacity, 0 where capacity <= 0.");
  m.def("best_node", &best_node, py::arg("scores"), py::arg("mask"),
        "Index of the best mask-true node (ties: smallest index), -1 if none.");
  m.def("ordered_nodes", &ordered_nodes, py::arg("scores"), py::arg("mask"),
        "Mask-true node indices by score descending, ties by index ascending.");
}

}  // namespace kai::bind
