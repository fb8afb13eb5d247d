// kai native core: load-aware scheduling kernels (Koordinator LoadAwareScheduling).
//
// Matrices are row-major int64 [num_nodes x num_resources]: cpu in millicores, every
// other resource in its integer unit (bytes for memory), as Koordinator vectorises them.
#pragma once

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

/// Usage-threshold filter of one pod against every node.
///
/// For node n in state kCheck and each resource r in column order with
/// thresholds[n,r] != 0 and allocatable[n,r] != 0:
///   usage = round(double(existing[n,r] + incoming[r]) / double(allocatable[n,r]) * 100)
/// (round = halves away from zero, like Go's math.Round); the node fails at the first r
/// with usage > thresholds[n,r] and code[n] = r.  mask[n] = (code[n] == kCodePass).
void filter(const std::int64_t* existing, const std::int64_t* incoming,
            const std::int64_t* allocatable, const std::int64_t* thresholds,
            const std::int64_t* state, std::size_t num_nodes, std::size_t num_resources,
            bool* mask, std::int64_t* code) noexcept;

/// Least-used score (0..100) of one pod on every node.
///
///   E = existing[n] + incoming;  s_r = 0 if A == 0 or E > A, else (A - E) * 100 / A
///   score = (sum_r w_r s_r + D * min_r s_r) / (sum_r w_r + D)   (integer division;
///           the min term only when D > 0; 0 when the denominator <= 0 or !valid[n])
void score(const std::int64_t* existing, const std::int64_t* incoming,
           const std::int64_t* allocatable, const std::int64_t* weights,
           std::int64_t dominant_weight, const bool* valid, std::size_t num_nodes,
           std::size_t num_resources, std::int64_t* out) noexcept;

}  // namespace kai::loadaware
