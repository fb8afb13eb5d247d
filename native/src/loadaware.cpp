// kai native core: load-aware scheduling kernels (see kai/loadaware.hpp).
#include "kai/loadaware.hpp"

#include <cmath>

namespace kai::loadaware {

void filter(const std::int64_t* existing, const std::int64_t* incoming,
            const std::int64_t* allocatable, const std::int64_t* thresholds,
            const std::int64_t* state, std::size_t num_nodes, std::size_t num_resources,
            bool* mask, std::int64_t* code) noexcept {
  for (std::size_t n = 0; n < num_nodes; ++n) {
    std::int64_t c = kCodePass;
    if (state[n] == kExpired) {
      c = kCodeExpired;
    } else if (state[n] != kPass) {
      const std::size_t row = n * num_resources;
      for (std::size_t r = 0; r < num_resources; ++r) {
        const std::int64_t thr = thresholds[row + r];
        const std::int64_t total = allocatable[row + r];
        if (thr == 0 || total == 0) continue;
        const std::int64_t used = existing[row + r] + incoming[r];
        // std::round rounds halves away from zero, as Go's math.Round does.
        const double usage =
            std::round(static_cast<double>(used) / static_cast<double>(total) * 100.0);
        if (usage > static_cast<double>(thr)) {
          c = static_cast<std::int64_t>(r);
          break;
        }
      }
    }
    code[n] = c;
    mask[n] = c == kCodePass;
  }
}

void score(const std::int64_t* existing, const std::int64_t* incoming,
           const std::int64_t* allocatable, const std::int64_t* weights,
           std::int64_t dominant_weight, const bool* valid, std::size_t num_nodes,
           std::size_t num_resources, std::int64_t* out) noexcept {
  std::int64_t den = dominant_weight;
  for (std::size_t r = 0; r < num_resources; ++r) den += weights[r];
  for (std::size_t n = 0; n < num_nodes; ++n) {
    out[n] = 0;
    if (den <= 0 || num_resources == 0 || !valid[n]) continue;
    const std::size_t row = n * num_resources;
    std::int64_t total = 0;
    std::int64_t lowest = 0;
    for (std::size_t r = 0; r < num_resources; ++r) {
      const std::int64_t cap = allocatable[row + r];
      const std::int64_t used = existing[row + r] + incoming[r];
      std::int64_t s = 0;
      if (cap != 0 && used <= cap) s = (cap - used) * 100 / cap;
      total += weights[r] * s;
      if (r == 0 || s < lowest) lowest = s;
    }
    if (dominant_weight > 0) total += dominant_weight * lowest;
    out[n] = total / den;
  }
}

}  // namespace kai::loadaware
