// Bindings of the fair-share arithmetic (kai/fairshare.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>

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

}  // namespace

void register_fairshare(py::module_& m) {
  m.def("dominant_share", &dominant_share, py::arg("allocated"), py::arg("total"),
        "Dominant resource share of each row of `allocated`.");
  m.def("divide_fair_share", &divide_fair_share, py::arg("total"), py::arg("deserved"),
        py::arg("limit"), py::arg("weight"), py::arg("request"), py::arg("priority"),
        py::arg("rank"), py::arg("k_value"), py::arg("usage"),
        "KAI proportion plugin: divide one resource among sibling queues.");
}

}  // namespace kai::bind
