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

IncrementalFit::IncrementalFit(const double* capacity, std::size_t num_nodes,
                               const double* available, std::size_t num_resources,
                               const double* gpu_requests, std::size_t num_gpu,
                               const double* requests, std::size_t num_tasks,
                               std::size_t gpu_column)
    : n_(num_nodes),
      r_(num_resources),
      gpu_(gpu_column),
      cap_(capacity, capacity + num_nodes),
      avail_(available, available + num_nodes * num_resources),
      gpu_req_(gpu_requests, gpu_requests + num_gpu),
      tasks_(num_tasks),
      stamp_(num_nodes, 0) {
  std::stable_sort(gpu_req_.begin(), gpu_req_.end(), std::greater<double>());
  std::vector<std::size_t> tasks(num_tasks);
  std::iota(tasks.begin(), tasks.end(), std::size_t{0});
  std::stable_sort(tasks.begin(), tasks.end(), [&](std::size_t a, std::size_t b) {
    return requests[a * r_ + gpu_] > requests[b * r_ + gpu_];
  });
  req_.resize(num_tasks * r_);
  same_.assign(num_tasks, 0);
  for (std::size_t i = 0; i < num_tasks; ++i) {
    const double* row = requests + tasks[i] * r_;
    std::copy(row, row + r_, req_.begin() + static_cast<std::ptrdiff_t>(i * r_));
    if (i > 0) {
      const double* prev = req_.data() + (i - 1) * r_;
      same_[i] = std::equal(row, row + r_, prev) ? 1 : 0;
    }
  }
  if (num_tasks > 0) {
    smallest_ = requests[gpu_];
    for (std::size_t i = 1; i < num_tasks; ++i) {
      smallest_ = std::min(smallest_, requests[i * r_ + gpu_]);
    }
  }
  cap_order_.marked.assign(n_, 0);
  avail_order_.marked.assign(n_, 0);
}

void IncrementalFit::touch(Order& order, std::size_t node) {
  if (order.built && !order.marked[node]) {
    order.marked[node] = 1;
    order.dirty.push_back(node);
  }
}

void IncrementalFit::set_capacity(const std::int64_t* nodes, const double* values,
                                  std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const auto node = static_cast<std::size_t>(nodes[i]);
    cap_[node] = values[i];
    touch(cap_order_, node);
  }
}

void IncrementalFit::add_available(const std::int64_t* nodes, const double* rows,
                                   std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const auto node = static_cast<std::size_t>(nodes[i]);
    double* row = avail_.data() + node * r_;
    const double* add = rows + i * r_;
    for (std::size_t r = 0; r < r_; ++r) row[r] += add[r];
    touch(avail_order_, node);
  }
}

void IncrementalFit::refresh(Order& order, const double* value, std::size_t stride) {
  auto& key = order.key;
  auto& idx = order.idx;
  auto before = [&key](std::size_t a, std::size_t b) {
    if (key[a] != key[b]) return key[a] > key[b];
    return a < b;
  };
  // Moving one node costs two shifts of the order; re-sorting wins for many nodes.
  if (!order.built || order.dirty.size() > 48) {
    key.resize(n_);
    for (std::size_t i = 0; i < n_; ++i) key[i] = value[i * stride];
    idx.resize(n_);
    std::iota(idx.begin(), idx.end(), std::size_t{0});
    std::sort(idx.begin(), idx.end(), before);
    order.built = true;
  } else {
    for (const std::size_t node : order.dirty) {
      const double now = value[node * stride];
      if (now == key[node]) continue;
      auto at = std::lower_bound(idx.begin(), idx.end(), node, before);
      idx.erase(at);
      key[node] = now;
      idx.insert(std::lower_bound(idx.begin(), idx.end(), node, before), node);
    }
  }
  for (const std::size_t node : order.dirty) order.marked[node] = 0;
  order.dirty.clear();
}

bool IncrementalFit::idle_gpus_fit() {
  const std::size_t k = gpu_req_.size();
  if (k == 0) return true;
  refresh(cap_order_, cap_.data(), 1);
  const std::size_t top = std::min(k, n_);
  remaining_.resize(top);
  for (std::size_t j = 0; j < top; ++j) remaining_[j] = cap_[cap_order_.idx[j]];
  // Equal requests in a row: the nodes before the previous one's node still cannot take
  // it (remaining capacity only shrinks), so the scan resumes there.
  std::size_t start = 0;
  for (std::size_t i = 0; i < k; ++i) {
    const double r = gpu_req_[i];
    if (!(r > 0.0)) return true;
    if (i == 0 || r != gpu_req_[i - 1]) start = 0;
    bool placed = false;
    for (std::size_t j = start; j < top; ++j) {
      if (r <= remaining_[j] + EPS) {
        remaining_[j] -= r;
        placed = true;
        start = j;
        break;
      }
    }
    if (!placed) return false;
  }
  return true;
}

bool IncrementalFit::scenario_fit() {
  if (tasks_ == 0) return true;
  refresh(avail_order_, avail_.data() + gpu_, r_);
  const auto& idx = avail_order_.idx;
  std::size_t eligible = n_;
  if (smallest_ > 0.0) {
    const auto& key = avail_order_.key;
    const double smallest = smallest_;
    eligible = static_cast<std::size_t>(
        std::partition_point(idx.begin(), idx.end(),
                             [&](std::size_t a) { return key[a] + EPS >= smallest; }) -
        idx.begin());
  }
  if (eligible == 0) return false;
  if (++epoch_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    epoch_ = 1;
  }
  saved_nodes_.clear();
  saved_rows_.clear();
  bool ok = true;
  std::size_t start = 0;
  for (std::size_t t = 0; t < tasks_ && ok; ++t) {
    const double* req = req_.data() + t * r_;
    // Same request as the previous task: the nodes before its node still do not fit.
    if (!same_[t]) start = 0;
    bool placed = false;
    for (std::size_t j = start; j < eligible; ++j) {
      const std::size_t n = idx[j];
      double* row = avail_.data() + n * r_;
      bool fits = true;
      for (std::size_t r = 0; r < r_; ++r) {
        if (req[r] == 0.0) continue;
        if (!(req[r] <= row[r] + EPS)) {
          fits = false;
          break;
        }
      }
      if (fits) {
        if (stamp_[n] != epoch_) {
          stamp_[n] = epoch_;
          saved_nodes_.push_back(n);
          saved_rows_.insert(saved_rows_.end(), row, row + r_);
        }
        for (std::size_t r = 0; r < r_; ++r) row[r] -= req[r];
        placed = true;
        start = j;
        break;
      }
    }
    ok = placed;
  }
  for (std::size_t i = 0; i < saved_nodes_.size(); ++i) {
    std::copy(saved_rows_.begin() + static_cast<std::ptrdiff_t>(i * r_),
              saved_rows_.begin() + static_cast<std::ptrdiff_t>((i + 1) * r_),
              avail_.begin() + static_cast<std::ptrdiff_t>(saved_nodes_[i] * r_));
  }
  return ok;
}

}  // namespace kai::solver
