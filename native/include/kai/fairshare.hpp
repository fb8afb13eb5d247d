// kai native core: fairness computations (DRF dominant share, proportion fair share).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kai/common.hpp"

namespace kai::fairshare {

/// Dominant resource share of each of num_rows consumers:
///   out[m] = max over r with total[r] > 0 of allocated[m, r] / total[r]; 0 if no such r.
/// allocated: [num_rows x num_resources], row-major; total: [num_resources].
void dominant_share(const double* allocated, const double* total, std::size_t num_rows,
                    std::size_t num_resources, double* out) noexcept;

/// Per-queue inputs of divide_fair_share (all arrays have num_queues elements).
struct QueueShareInput {
  std::size_t num_queues = 0;
  const double* deserved = nullptr;       // -1 = unlimited deserved quota
  const double* limit = nullptr;          // -1 = no limit
  const double* weight = nullptr;         // over-quota weight
  const double* request = nullptr;        // total requested amount
  const std::int64_t* priority = nullptr; // higher priority groups are served first
  const std::int64_t* rank = nullptr;     // tie-break order, smaller = older = wins
  const double* usage = nullptr;          // normalised historical usage
};

/// KAI proportion plugin: divide `total` units of ONE resource among sibling queues.
///
/// Phases (see src/kai/backends/python_backend.py for the reference implementation):
///   1. deserved quota, in index order;
///   2. over-quota by priority group (high to low) in weighted rounds, whole units only;
///   3. left-over fractional units, one per queue by largest remainder then rank.
/// `fair` receives num_queues values.
void divide_fair_share(double total, const QueueShareInput& queues, double k_value,
                       double* fair);

}  // namespace kai::fairshare
