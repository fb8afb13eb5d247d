// Bindings of the resource fit (kai/fit.hpp).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>

#include "kai/fit.hpp"
#include "common.hpp"
#include "registrations.hpp"

namespace kai::bind {
namespace {

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

}  // namespace

void register_fit(py::module_& m) {
  m.def("fit_mask", &fit_mask, py::arg("request"), py::arg("idle"), py::arg("releasing"),
        "(fits_any, fits_idle) boolean masks over nodes for one resource request.");
}

}  // namespace kai::bind
