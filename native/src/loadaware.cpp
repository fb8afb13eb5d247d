// kai native core: load-aware scheduling kernels (see kai/loadaware.hpp).
#include "kai/loadaware.hpp"

namespace kai::loadaware {

void filter(const std::int64_t* existing, const std::int64_t* incoming,
            const std::int64_t* allocatable, const std::int64_t* thresholds,
            const std::int64_t* state, std::size_t num_nodes, std::size_t num_resources,
            bool* mask, std::int64_t* code) noexcept {
  for (std::size_t n = 0; n < num_nodes; ++n) {
    const std::size_t row = n * num_resources;
    const std::int64_t c = filter_node(existing + row, incoming, allocatable + row,
                                       thresholds + row, state[n], num_resources);
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
    const std::size_t row = n * num_resources;
    out[n] = valid[n] ? score_node(existing + row, incoming, allocatable + row, weights,
                                   dominant_weight, den, num_resources)
                      : 0;
  }
}

}  // namespace kai::loadaware
