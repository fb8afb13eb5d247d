// kai native core: node scoring and node selection.
#pragma once

#include <cstddef>
#include <vector>

#include "kai/common.hpp"

namespace kai::score {

/// KAI "binpack" node-placement score for one resource, on a 0..max_score scale.
///
/// min/max of non_allocated are taken over nodes with candidates[n] && allocatable[n] > 0.
/// Per node: 0 if allocatable[n] <= 0, if no such node exists or if max == 0;
/// max_score if min == max; otherwise max_score * (1 - (non_allocated[n] - min) / (max - min)).
/// Non-candidate nodes get the formula value too (the caller masks them).
void binpack_score(const double* non_allocated, const double* allocatable,
                   const bool* candidates, std::size_t num_nodes, double max_score,
                   double* out) noexcept;

/// "Spread" score: non_allocated[n] / capacity[n], 0 where capacity[n] <= 0.
void spread_score(const double* non_allocated, const double* capacity, std::size_t num_nodes,
                  double* out) noexcept;

/// Index of the highest score among mask-true nodes (ties -> smallest index), -1 if none.
index_t best_node(const double* scores, const bool* mask, std::size_t num_nodes) noexcept;

/// Indices of mask-true nodes, by score descending, ties by index ascending.
std::vector<index_t> ordered_nodes(const double* scores, const bool* mask,
                                   std::size_t num_nodes);

}  // namespace kai::score
