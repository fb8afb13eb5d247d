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

/// Inputs of divide_fair_share_tree: a queue tree and, per resource, the per-queue
/// arrays of QueueShareInput.
struct QueueTreeInput {
  std::size_t num_queues = 0;
  std::size_t num_resources = 0;
  const std::int64_t* parent = nullptr;    // a queue's parent; -1 (or no queue): the root
  const double* deserved = nullptr;        // [num_resources x num_queues], resource-major
  const double* limit = nullptr;           // likewise
  const double* weight = nullptr;          // likewise
  const double* request = nullptr;         // likewise
  const double* usage = nullptr;           // likewise
  const std::int64_t* priority = nullptr;  // [num_queues]
  const std::int64_t* rank = nullptr;      // [num_queues]
};

/// The fair shares of a queue tree, top down: the root's children divide `total`
/// (one value per resource), each queue's children divide its fair share, every
/// resource on its own (divide_fair_share), siblings in rank order (then index order).
/// A queue no path from the root reaches (a cycle) gets 0.  `fair` receives
/// [num_resources x num_queues] values, resource-major.
void divide_fair_share_tree(const double* total, const QueueTreeInput& tree, double k_value,
                            double* fair);

}  // namespace kai::fairshare
