// kai native core: node scoring and node selection (see kai/score.hpp).
#include "kai/score.hpp"

#include <algorithm>

namespace kai::score {

void binpack_score(const double* non_allocated, const double* allocatable,
                   const bool* candidates, std::size_t num_nodes, double max_score,
                   double* out) noexcept {
  // Range of non-allocated amounts over the candidate nodes that have the resource.
  bool have = false;
  double lo = 0.0;
  double hi = 0.0;
  for (std::size_t n = 0; n < num_nodes; ++n) {
    if (!candidates[n] || !(allocatable[n] > 0.0)) continue;
    const double v = non_allocated[n];
    if (!have) {
      lo = hi = v;
      have = true;
    } else {
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  for (std::size_t n = 0; n < num_nodes; ++n) {
    if (!(allocatable[n] > 0.0) || !have || hi == 0.0) {
      out[n] = 0.0;
    } else if (lo == hi) {
      out[n] = max_score;
    } else {
      out[n] = max_score * (1.0 - (non_allocated[n] - lo) / (hi - lo));
    }
  }
}

void spread_score(const double* non_allocated, const double* capacity, std::size_t num_nodes,
                  double* out) noexcept {
  for (std::size_t n = 0; n < num_nodes; ++n) {
    out[n] = capacity[n] > 0.0 ? non_allocated[n] / capacity[n] : 0.0;
  }
}

index_t best_node(const double* scores, const bool* mask, std::size_t num_nodes) noexcept {
  index_t best = -1;
  double best_score = 0.0;
  for (std::size_t n = 0; n < num_nodes; ++n) {
    if (!mask[n]) continue;
    // Strict '>' keeps the smallest index on ties.
    if (best < 0 || scores[n] > best_score) {
      best = static_cast<index_t>(n);
      best_score = scores[n];
    }
  }
  return best;
}

std::vector<index_t> ordered_nodes(const double* scores, const bool* mask,
                                   std::size_t num_nodes) {
  std::vector<index_t> order;
  order.reserve(num_nodes);
  for (std::size_t n = 0; n < num_nodes; ++n) {
    if (mask[n]) order.push_back(static_cast<index_t>(n));
  }
  // Indices are collected in ascending order, so a stable sort on score keeps index
  // order among equal scores.
  std::stable_sort(order.begin(), order.end(),
                   [scores](index_t a, index_t b) { return scores[a] > scores[b]; });
  return order;
}

}  // namespace kai::score
