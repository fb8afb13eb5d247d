// kai native core: load-aware scheduling kernels (Koordinator LoadAwareScheduling).
//
// Matrices are row-major int64 [num_nodes x num_resources]: cpu in millicores, every
// other resource in its integer unit (bytes for memory), as Koordinator vectorises them.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kai/common.hpp"

namespace kai::loadaware {

/// Node states understood by filter().
inline constexpr std::int64_t kCheck = 0;    // check the thresholds
inline constexpr std::int64_t kPass = 1;     // pass unconditionally (no metric, no thresholds)
inline constexpr std::int64_t kExpired = 2;  // reject: the node's metric expired

/// Codes written by filter() besides a resource index.
inline constexpr std::int64_t kCodePass = -1;
inline constexpr std::int64_t kCodeExpired = -2;

/// Usage-threshold check of one pod against one node (the row of each matrix): for
/// a node in state kCheck and each resource r in column order with thresholds[r] != 0
/// and allocatable[r] != 0,
///   usage = round(double(existing[r] + incoming[r]) / double(allocatable[r]) * 100)
/// (round = halves away from zero, like Go's math.Round); the node fails at the first r
/// with usage > thresholds[r].  Returns that r, kCodeExpired, or kCodePass.
inline std::int64_t filter_node(const std::int64_t* existing, const std::int64_t* incoming,
                                const std::int64_t* allocatable,
                                const std::int64_t* thresholds, std::int64_t state,
                                std::size_t num_resources) noexcept {
  if (state == kExpired) return kCodeExpired;
  if (state == kPass) return kCodePass;
  for (std::size_t r = 0; r < num_resources; ++r) {
    const std::int64_t thr = thresholds[r];
    const std::int64_t total = allocatable[r];
    if (thr == 0 || total == 0) continue;
    const std::int64_t used = existing[r] + incoming[r];
    // std::round rounds halves away from zero, as Go's math.Round does.
    const double usage = std::round(static_cast<double>(used) / static_cast<double>(total) * 100.0);
    if (usage > static_cast<double>(thr)) return static_cast<std::int64_t>(r);
  }
  return kCodePass;
}

/// Least-used score (0..100) of one pod on one node; ``denominator`` is
/// sum_r weights[r] + dominant_weight (see score()).
inline std::int64_t score_node(const std::int64_t* existing, const std::int64_t* incoming,
                               const std::int64_t* allocatable, const std::int64_t* weights,
                               std::int64_t dominant_weight, std::int64_t denominator,
                               std::size_t num_resources) noexcept {
  if (denominator <= 0 || num_resources == 0) return 0;
  std::int64_t total = 0;
  std::int64_t lowest = 0;
  for (std::size_t r = 0; r < num_resources; ++r) {
    const std::int64_t cap = allocatable[r];
    const std::int64_t used = existing[r] + incoming[r];
    std::int64_t s = 0;
    if (cap != 0 && used <= cap) s = (cap - used) * 100 / cap;
    total += weights[r] * s;
    if (r == 0 || s < lowest) lowest = s;
  }
  if (dominant_weight > 0) total += dominant_weight * lowest;
  return total / denominator;
}

/// filter_node() of one pod against every node (matrices of num_nodes rows):
/// code[n] is its result and mask[n] = (code[n] == kCodePass).
void filter(const std::int64_t* existing, const std::int64_t* incoming,
            const std::int64_t* allocatable, const std::int64_t* thresholds,
            const std::int64_t* state, std::size_t num_nodes, std::size_t num_resources,
            bool* mask, std::int64_t* code) noexcept;

/// score_node() of one pod on every node:
///   E = existing[n] + incoming;  s_r = 0 if A == 0 or E > A, else (A - E) * 100 / A
///   score = (sum_r w_r s_r + D * min_r s_r) / (sum_r w_r + D)   (integer division;
///           the min term only when D > 0; 0 when the denominator <= 0 or !valid[n])
void score(const std::int64_t* existing, const std::int64_t* incoming,
           const std::int64_t* allocatable, const std::int64_t* weights,
           std::int64_t dominant_weight, const bool* valid, std::size_t num_nodes,
           std::size_t num_resources, std::int64_t* out) noexcept;

}  // namespace kai::loadaware
