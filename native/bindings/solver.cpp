// Bindings of the victim-search fit checks (kai/solver.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kai/solver.hpp"
#include "common.hpp"
#include "registrations.hpp"

namespace kai::bind {
namespace {

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

void register_solver(py::module_& m) {
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
}

}  // namespace kai::bind
