// kai native core: resource-fit predicates.
#pragma once

#include <cstddef>

#include "kai/common.hpp"

namespace kai::fit {

/// For each node n, decide whether `request` fits.
///
///   fits_any[n]  = for all r: request[r] == 0 or request[r] <= (idle[n,r] + releasing[n,r]) + EPS
///   fits_idle[n] = for all r: request[r] == 0 or request[r] <= idle[n,r] + EPS
///
/// request: [num_resources]; idle, releasing: [num_nodes x num_resources], row-major.
/// fits_any, fits_idle: outputs of length num_nodes.
void fit_mask(const double* request, const double* idle, const double* releasing,
              std::size_t num_nodes, std::size_t num_resources, bool* fits_any,
              bool* fits_idle) noexcept;

}  // namespace kai::fit
