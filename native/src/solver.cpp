// kai native core: capacity checks of the victim-search solver (see kai/solver.hpp).
#include "kai/solver.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <vector>

namespace kai::solver {

namespace {

// Node indices by value descending, ties by index ascending (a strict total order, so the
// result is the same as a stable sort and identical across backends).
std::vector<std::size_t> by_value_desc(const double* value, std::size_t n, std::size_t stride,
                                       std::size_t keep) {
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  auto better = [value, stride](std::size_t a, std::size_t b) {
    const double va = value[a * stride];
    const double vb = value[b * stride];
    if (va != vb) return va > vb;
    return a < b;
  };
  keep = std::min(keep, n);
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(),
                    better);
  idx.resize(keep);
  return idx;
}

}  // namespace

bool idle_gpus_fit(const double* capacity, std::size_t num_nodes, const double* requests,
                   std::size_t num_requests) {
  if (num_requests == 0) return true;
  std::vector<double> req(requests, requests + num_requests);
  std::stable_sort(req.begin(), req.end(), std::greater<double>());
  const std::vector<std::size_t> top = by_value_desc(capacity, num_nodes, 1, num_requests);
  std::vector<double> remaining(top.size());
  for (std::size_t j = 0; j < top.size(); ++j) remaining[j] = capacity[top[j]];
  for (const double r : req) {
    if (!(r > 0.0)) return true;
    bool placed = false;
    for (double& rem : remaining) {
      if (r <= rem + EPS) {
        rem -= r;
        placed = true;
        break;
      }
    }
    if (!placed) return false;
  }
  return true;
}

bool scenario_fit(const double* available, std::size_t num_nodes, std::size_t num_resources,
                  const double* requests, std::size_t num_tasks, std::size_t gpu_column) {
  if (num_tasks == 0) return true;
  if (num_nodes == 0) return false;
  std::vector<std::size_t> tasks(num_tasks);
  std::iota(tasks.begin(), tasks.end(), std::size_t{0});
  std::stable_sort(tasks.begin(), tasks.end(), [&](std::size_t a, std::size_t b) {
    return requests[a * num_resources + gpu_column] > requests[b * num_resources + gpu_column];
  });
  const std::vector<std::size_t> nodes =
      by_value_desc(available + gpu_column, num_nodes, num_resources, num_nodes);
  std::vector<double> avail(available, available + num_nodes * num_resources);
  for (const std::size_t t : tasks) {
    const double* req = requests + t * num_resources;
    bool placed = false;
    for (const std::size_t n : nodes) {
      double* row = avail.data() + n * num_resources;
      bool fits = true;
      for (std::size_t r = 0; r < num_resources; ++r) {
        if (req[r] == 0.0) continue;
        if (!(req[r] <= row[r] + EPS)) {
          fits = false;
          break;
        }
      }
      if (fits) {
        for (std::size_t r = 0; r < num_resources; ++r) row[r] -= req[r];
        placed = true;
        break;
      }
    }
    if (!placed) return false;
  }
  return true;
}

}  // namespace kai::solver
