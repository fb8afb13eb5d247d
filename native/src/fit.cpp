// kai native core: resource-fit predicates (see kai/fit.hpp).
#include "kai/fit.hpp"

namespace kai::fit {

void fit_mask(const double* request, const double* idle, const double* releasing,
              std::size_t num_nodes, std::size_t num_resources, bool* fits_any,
              bool* fits_idle) noexcept {
  for (std::size_t n = 0; n < num_nodes; ++n) {
    const double* idle_row = idle + n * num_resources;
    const double* releasing_row = releasing + n * num_resources;
    bool any_ok = true;
    bool idle_ok = true;
    for (std::size_t r = 0; r < num_resources; ++r) {
      const double req = request[r];
      if (req == 0.0) continue;  // a resource that is not requested always fits
      // Written as !(a <= b) so that NaN never counts as fitting.
      if (!(req <= (idle_row[r] + releasing_row[r]) + EPS)) any_ok = false;
      if (!(req <= idle_row[r] + EPS)) idle_ok = false;
    }
    fits_any[n] = any_ok;
    fits_idle[n] = idle_ok;
  }
}

}  // namespace kai::fit
