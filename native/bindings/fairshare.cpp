// Bindings of the fair-share arithmetic (kai/fairshare.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kai/fairshare.hpp"
#include "common.hpp"
#include "registrations.hpp"

namespace kai::bind {
namespace {

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

// A [rows x cols] array's shape check.
void require_shape(const F64& a, std::size_t rows, std::size_t cols, const char* name) {
  require_ndim(a, 2, name);
  if (static_cast<std::size_t>(a.shape(0)) != rows ||
      static_cast<std::size_t>(a.shape(1)) != cols) {
    throw py::value_error(std::string(name) + ": expected shape (" + std::to_string(rows) +
                          ", " + std::to_string(cols) + ")");
  }
}

py::array_t<double> divide_fair_share_tree(const F64& total, const I64& parent,
                                           const F64& deserved, const F64& limit,
                                           const F64& weight, const F64& request,
                                           const I64& priority, const I64& rank,
                                           double k_value, const F64& usage) {
  kai::fairshare::QueueTreeInput tree;
  tree.num_resources = vector_len(total, "total");
  tree.num_queues = vector_len(parent, "parent");
  const std::size_t nr = tree.num_resources, nq = tree.num_queues;
  require_shape(deserved, nr, nq, "deserved");
  require_shape(limit, nr, nq, "limit");
  require_shape(weight, nr, nq, "weight");
  require_shape(request, nr, nq, "request");
  require_shape(usage, nr, nq, "usage");
  require_len(priority, nq, "priority");
  require_len(rank, nq, "rank");
  tree.parent = parent.data();
  tree.deserved = deserved.data();
  tree.limit = limit.data();
  tree.weight = weight.data();
  tree.request = request.data();
  tree.usage = usage.data();
  tree.priority = priority.data();
  tree.rank = rank.data();
  py::array_t<double> out({static_cast<py::ssize_t>(nr), static_cast<py::ssize_t>(nq)});
  double* o = out.mutable_data();
  const double* t = total.data();
  {
    py::gil_scoped_release nogil;
    kai::fairshare::divide_fair_share_tree(t, tree, k_value, o);
  }
  return out;
}

}  // namespace

void register_fairshare(py::module_& m) {
  m.def("dominant_share", &dominant_share, py::arg("allocated"), py::arg("total"),
        "Dominant resource share of each row of `allocated`.");
  m.def("divide_fair_share", &divide_fair_share, py::arg("total"), py::arg("deserved"),
        py::arg("limit"), py::arg("weight"), py::arg("request"), py::arg("priority"),
        py::arg("rank"), py::arg("k_value"), py::arg("usage"),
        "KAI proportion plugin: divide one resource among sibling queues.");
  m.def("divide_fair_share_tree", &divide_fair_share_tree, py::arg("total"), py::arg("parent"),
        py::arg("deserved"), py::arg("limit"), py::arg("weight"), py::arg("request"),
        py::arg("priority"), py::arg("rank"), py::arg("k_value"), py::arg("usage"),
        "KAI proportion plugin: the fair shares of a queue tree, every resource.");
}

}  // namespace kai::bind
