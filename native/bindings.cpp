// pybind11 bindings of kai's native core: module `kai._native`.
//
// Every function here:
//   * takes numpy arrays (converted to C-contiguous float64 / bool / int64 copies only when
//     the input is not already in that form: inputs are never modified),
//   * validates shapes and raises ValueError on mismatch,
//   * allocates its outputs while holding the GIL, then releases the GIL for the kernel.
//
// Adding a kernel: declare it in native/include/kai/<area>.hpp, implement it in
// native/src/<area>.cpp (new files go into KAI_NATIVE_SOURCES in CMakeLists.txt), and bind
// it below with the same Python signature as src/kai/backends/python_backend.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/allocate.hpp"
#include "kai/common.hpp"
#include "kai/fairshare.hpp"
#include "kai/fit.hpp"
#include "kai/loadaware.hpp"
#include "kai/memory.hpp"
#include "kai/solver.hpp"
#include "kai/score.hpp"

#ifndef KAI_VERSION_INFO
#define KAI_VERSION_INFO "0.0.0+local"
#endif

namespace py = pybind11;

namespace {

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

// ----------------------------------------------------------------------------------- fit

py::tuple fit_mask(const F64& request, const F64& idle, const F64& releasing) {
  const std::size_t r = vector_len(request, "request");
  require_ndim(idle, 2, "idle");
  require_ndim(releasing, 2, "releasing");
  const auto n = static_cast<std::size_t>(idle.shape(0));
  if (static_cast<std::size_t>(idle.shape(1)) != r) {
    throw py::value_error("idle: expected " + std::to_string(r) + " resource columns");
  }
  if (releasing.shape(0) != idle.shape(0) || releasing.shape(1) != idle.shape(1)) {
    throw py::value_error("releasing: shape must match idle");
  }
  py::array_t<bool> fits_any(static_cast<py::ssize_t>(n));
  py::array_t<bool> fits_idle(static_cast<py::ssize_t>(n));
  const double* req_p = request.data();
  const double* idle_p = idle.data();
  const double* rel_p = releasing.data();
  bool* any_p = fits_any.mutable_data();
  bool* idle_out_p = fits_idle.mutable_data();
  {
    py::gil_scoped_release nogil;
    kai::fit::fit_mask(req_p, idle_p, rel_p, n, r, any_p, idle_out_p);
  }
  return py::make_tuple(fits_any, fits_idle);
}

// --------------------------------------------------------------------------------- score

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

// ----------------------------------------------------------------------------- fairshare

py::array_t<double> dominant_share(const F64& allocated, const F64& total) {
  const std::size_t r = vector_len(total, "total");
  require_ndim(allocated, 2, "allocated");
  if (static_cast<std::size_t>(allocated.shape(1)) != r) {
    throw py::value_error("allocated: expected " + std::to_string(r) + " resource columns");
  }
  const auto m = static_cast<std::size_t>(allocated.shape(0));
  py::array_t<double> out(static_cast<py::ssize_t>(m));
  const double* a = allocated.data();
  const double* t = total.data();
  double* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    kai::fairshare::dominant_share(a, t, m, r, o);
  }
  return out;
}

py::array_t<double> divide_fair_share(double total, const F64& deserved, const F64& limit,
                                      const F64& weight, const F64& request,
                                      const I64& priority, const I64& rank, double k_value,
                                      const F64& usage) {
  kai::fairshare::QueueShareInput in;
  in.num_queues = vector_len(deserved, "deserved");
  require_len(limit, in.num_queues, "limit");
  require_len(weight, in.num_queues, "weight");
  require_len(request, in.num_queues, "request");
  require_len(priority, in.num_queues, "priority");
  require_len(rank, in.num_queues, "rank");
  require_len(usage, in.num_queues, "usage");
  in.deserved = deserved.data();
  in.limit = limit.data();
  in.weight = weight.data();
  in.request = request.data();
  in.priority = priority.data();
  in.rank = rank.data();
  in.usage = usage.data();
  py::array_t<double> out(static_cast<py::ssize_t>(in.num_queues));
  double* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    kai::fairshare::divide_fair_share(total, in, k_value, o);
  }
  return out;
}

// ----------------------------------------------------------------------------- loadaware

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

// -------------------------------------------------------------------------------- solver

bool idle_gpus_fit(const F64& capacity, const F64& requests) {
  const std::size_t n = vector_len(capacity, "capacity");
  const std::size_t k = vector_len(requests, "requests");
  const double* c = capacity.data();
  const double* q = requests.data();
  py::gil_scoped_release nogil;
  return kai::solver::idle_gpus_fit(c, n, q, k);
}

bool scenario_fit(const F64& available, const F64& requests, std::size_t gpu_column) {
  require_ndim(available, 2, "available");
  require_ndim(requests, 2, "requests");
  const auto r = static_cast<std::size_t>(requests.shape(1));
  if (static_cast<std::size_t>(available.shape(1)) != r) {
    throw py::value_error("available: expected " + std::to_string(r) + " resource columns");
  }
  if (gpu_column >= r) throw py::value_error("gpu_column out of range");
  const auto n = static_cast<std::size_t>(available.shape(0));
  const auto t = static_cast<std::size_t>(requests.shape(0));
  const double* a = available.data();
  const double* q = requests.data();
  py::gil_scoped_release nogil;
  return kai::solver::scenario_fit(a, n, r, q, t, gpu_column);
}


kai::solver::IncrementalFit* make_incremental_fit(const F64& capacity, const F64& available,
                                                  const F64& gpu_requests, const F64& requests,
                                                  std::size_t gpu_column) {
  const std::size_t n = vector_len(capacity, "capacity");
  require_ndim(available, 2, "available");
  require_ndim(requests, 2, "requests");
  const auto r = static_cast<std::size_t>(requests.shape(1));
  if (static_cast<std::size_t>(available.shape(1)) != r) {
    throw py::value_error("available: expected " + std::to_string(r) + " resource columns");
  }
  if (static_cast<std::size_t>(available.shape(0)) != n) {
    throw py::value_error("available: expected " + std::to_string(n) + " rows");
  }
  if (gpu_column >= r) throw py::value_error("gpu_column out of range");
  const std::size_t k = vector_len(gpu_requests, "gpu_requests");
  return new kai::solver::IncrementalFit(capacity.data(), n, available.data(), r,
                                         gpu_requests.data(), k, requests.data(),
                                         static_cast<std::size_t>(requests.shape(0)),
                                         gpu_column);
}

std::size_t checked_nodes(const kai::solver::IncrementalFit& fit, const I64& nodes) {
  const std::size_t m = vector_len(nodes, "nodes");
  const std::int64_t* p = nodes.data();
  for (std::size_t i = 0; i < m; ++i) {
    if (p[i] < 0 || static_cast<std::size_t>(p[i]) >= fit.num_nodes()) {
      throw py::index_error("nodes: node index out of range");
    }
  }
  return m;
}

void fit_set_capacity(kai::solver::IncrementalFit& fit, const I64& nodes, const F64& values) {
  const std::size_t m = checked_nodes(fit, nodes);
  require_len(values, m, "values");
  fit.set_capacity(nodes.data(), values.data(), m);
}

void fit_add_available(kai::solver::IncrementalFit& fit, const I64& nodes, const F64& rows) {
  const std::size_t m = checked_nodes(fit, nodes);
  if (m == 0) return;
  require_ndim(rows, 2, "rows");
  if (static_cast<std::size_t>(rows.shape(0)) != m ||
      static_cast<std::size_t>(rows.shape(1)) != fit.num_resources()) {
    throw py::value_error("rows: expected shape (" + std::to_string(m) + ", " +
                          std::to_string(fit.num_resources()) + ")");
  }
  fit.add_available(nodes.data(), rows.data(), m);
}

py::array_t<double> vector_copy(const std::vector<double>& v, std::size_t rows,
                                std::size_t cols) {
  if (cols == 0) {
    py::array_t<double> out(static_cast<py::ssize_t>(rows));
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
  }
  py::array_t<double> out({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(cols)});
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}
}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "kai compiled core: scheduling kernels (see kai.backends for the Python API)";
  m.attr("__version__") = KAI_VERSION_INFO;
  m.attr("EPS") = kai::EPS;

  // fit
  m.def("fit_mask", &fit_mask, py::arg("request"), py::arg("idle"), py::arg("releasing"),
        "(fits_any, fits_idle) boolean masks over nodes for one resource request.");

  // score
  m.def("binpack_score", &binpack_score, py::arg("non_allocated"), py::arg("allocatable"),
        py::arg("candidates"), py::arg("max_score"),
        "KAI binpack node-placement score (0..max_score).");
  m.def("spread_score", &spread_score, py::arg("non_allocated"), py::arg("capacity"),
        "non_allocated / capacity, 0 where capacity <= 0.");
  m.def("best_node", &best_node, py::arg("scores"), py::arg("mask"),
        "Index of the best mask-true node (ties: smallest index), -1 if none.");
  m.def("ordered_nodes", &ordered_nodes, py::arg("scores"), py::arg("mask"),
        "Mask-true node indices by score descending, ties by index ascending.");

  // fairshare
  m.def("dominant_share", &dominant_share, py::arg("allocated"), py::arg("total"),
        "Dominant resource share of each row of `allocated`.");
  m.def("divide_fair_share", &divide_fair_share, py::arg("total"), py::arg("deserved"),
        py::arg("limit"), py::arg("weight"), py::arg("request"), py::arg("priority"),
        py::arg("rank"), py::arg("k_value"), py::arg("usage"),
        "KAI proportion plugin: divide one resource among sibling queues.");

  // loadaware
  m.def("loadaware_filter", &loadaware_filter, py::arg("existing"), py::arg("incoming"),
        py::arg("allocatable"), py::arg("thresholds"), py::arg("state"),
        "Koordinator load-aware usage-threshold filter: (mask, first failing resource).");
  m.def("loadaware_score", &loadaware_score, py::arg("existing"), py::arg("incoming"),
        py::arg("allocatable"), py::arg("weights"), py::arg("dominant_weight"),
        py::arg("valid"), "Koordinator load-aware least-used score (0..100) per node.");

  // memory
  m.def("retain_arenas", &kai::memory::retain_arenas, py::arg("max_bytes"),
        "Keep freed object arenas mapped for reuse, up to max_bytes (0: none).");
  m.def("cached_arena_bytes", &kai::memory::cached_bytes,
        "Bytes of freed object arenas the cache holds now.");

  // solver
  m.def("idle_gpus_fit", &idle_gpus_fit, py::arg("capacity"), py::arg("requests"),
        "AccumulatedIdleGpus: greedy match of GPU needs to the top-k nodes by capacity.");
  m.def("scenario_fit", &scenario_fit, py::arg("available"), py::arg("requests"),
        py::arg("gpu_column"), "Greedy per-node fit of a scenario's pending tasks.");

  py::class_<kai::solver::IncrementalFit>(
      m, "IncrementalFit",
      "idle_gpus_fit and scenario_fit over arrays changed step by step (sorted nodes kept).")
      .def(py::init(&make_incremental_fit), py::arg("capacity"), py::arg("available"),
           py::arg("gpu_requests"), py::arg("requests"), py::arg("gpu_column"))
      .def("set_capacity", &fit_set_capacity, py::arg("nodes"), py::arg("values"))
      .def("add_available", &fit_add_available, py::arg("nodes"), py::arg("rows"))
      .def("idle_gpus_fit",
           [](kai::solver::IncrementalFit& fit) {
             py::gil_scoped_release nogil;
             return fit.idle_gpus_fit();
           })
      .def("scenario_fit",
           [](kai::solver::IncrementalFit& fit) {
             py::gil_scoped_release nogil;
             return fit.scenario_fit();
           })
      .def("capacity",
           [](const kai::solver::IncrementalFit& fit) {
             return vector_copy(fit.capacity(), fit.num_nodes(), 0);
           })
      .def("available", [](const kai::solver::IncrementalFit& fit) {
        return vector_copy(fit.available(), fit.num_nodes(), fit.num_resources());
      });

  // allocate (the whole action's loop, native/src/allocate.cpp)
  kai::alloc::register_bindings(m);
}
