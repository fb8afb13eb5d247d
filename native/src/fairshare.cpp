// kai native core: fairness computations (see kai/fairshare.hpp).
#include "kai/fairshare.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <vector>

namespace kai::fairshare {

void dominant_share(const double* allocated, const double* total, std::size_t num_rows,
                    std::size_t num_resources, double* out) noexcept {
  for (std::size_t m = 0; m < num_rows; ++m) {
    const double* row = allocated + m * num_resources;
    bool have = false;
    double best = 0.0;
    for (std::size_t r = 0; r < num_resources; ++r) {
      if (!(total[r] > 0.0)) continue;
      const double share = row[r] / total[r];
      if (!have || share > best) {
        best = share;
        have = true;
      }
    }
    out[m] = have ? best : 0.0;
  }
}

namespace {

/// Queue indices grouped by priority, groups ordered from highest to lowest priority,
/// queues inside a group in index order.
std::vector<std::vector<std::size_t>> priority_groups(const QueueShareInput& in) {
  std::vector<std::int64_t> levels(in.priority, in.priority + in.num_queues);
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  std::vector<std::vector<std::size_t>> groups(levels.size());
  for (std::size_t g = 0; g < levels.size(); ++g) {
    for (std::size_t q = 0; q < in.num_queues; ++q) {
      if (in.priority[q] == levels[g]) groups[g].push_back(q);
    }
  }
  return groups;
}

/// A queue still wants more: below its request and below its (optional) limit.
inline bool unsatisfied(const QueueShareInput& in, const double* fair, std::size_t q) {
  const bool request_met = in.request[q] <= fair[q];
  const bool limit_met = in.limit[q] != UNLIMITED && in.limit[q] <= fair[q];
  return !(request_met || limit_met);
}

/// Weighted over-quota rounds for one priority group; updates fair/remaining/remainder.
void divide_over_quota(const QueueShareInput& in, const std::vector<std::size_t>& group,
                       const std::vector<double>& requestable, double k_value, double* fair,
                       double& remaining, std::vector<double>& remainder) {
  std::vector<std::size_t> active;
  std::vector<double> share_weight(in.num_queues, 0.0);
  while (remaining > 0.0) {
    active.clear();
    double total_weight = 0.0;
    for (std::size_t q : group) {
      if (!unsatisfied(in, fair, q)) continue;
      active.push_back(q);
      if (requestable[q] - fair[q] > 0.0) total_weight += in.weight[q];
    }
    if (total_weight == 0.0) return;

    double sum_share_weight = 0.0;
    for (std::size_t q : active) {
      const double nw = in.weight[q] / total_weight;
      share_weight[q] = std::max(0.0, nw + k_value * (nw - in.usage[q]));
      sum_share_weight += share_weight[q];
    }
    if (sum_share_weight == 0.0) return;

    const double amount_this_round = remaining;
    bool someone_needed_less = false;
    bool changed = false;
    for (std::size_t q : active) {
      if (!(share_weight[q] > 0.0)) continue;
      const double fair_q = amount_this_round * share_weight[q] / sum_share_weight;
      const double need = requestable[q] - fair[q];
      const double before = fair[q];
      if (need <= fair_q) {
        fair[q] += need;
        remaining -= need;
        someone_needed_less = true;
      } else {
        const double whole = std::floor(fair_q);
        fair[q] += whole;
        remaining -= whole;
        remainder[q] = fair_q - whole;
      }
      if (fair[q] != before) changed = true;
    }
    if (!someone_needed_less || !changed) return;
  }
}

}  // namespace

void divide_fair_share(double total, const QueueShareInput& in, double k_value, double* fair) {
  const std::size_t nq = in.num_queues;

  std::vector<double> requestable(nq);
  for (std::size_t q = 0; q < nq; ++q) {
    requestable[q] =
        in.limit[q] == UNLIMITED ? in.request[q] : std::min(in.request[q], in.limit[q]);
  }

  // Phase 1: deserved quota, in index order.
  double remaining = total;
  for (std::size_t q = 0; q < nq; ++q) {
    const double deserved = in.deserved[q] == UNLIMITED ? total : in.deserved[q];
    const double amount = std::min(deserved, requestable[q]);
    fair[q] = 0.0 + amount;
    remaining -= amount;
  }
  if (remaining <= 0.0) return;

  // Phase 2: over-quota, priority groups from high to low.
  const auto groups = priority_groups(in);
  std::vector<double> remainder(nq, 0.0);
  for (const auto& group : groups) {
    if (!(remaining > 0.0)) break;
    divide_over_quota(in, group, requestable, k_value, fair, remaining, remainder);
  }

  // Phase 3: fractional left-overs, one unit per queue, largest remainder first.
  std::vector<std::size_t> order;
  for (const auto& group : groups) {
    if (!(remaining > 0.0)) break;
    order.clear();
    for (std::size_t q : group) {
      if (remainder[q] > 0.0) order.push_back(q);
    }
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (remainder[a] != remainder[b]) return remainder[a] > remainder[b];
      if (in.rank[a] != in.rank[b]) return in.rank[a] < in.rank[b];
      return a < b;
    });
    for (std::size_t q : order) {
      if (!(remaining > 0.0)) break;
      const double give = std::min(1.0, remaining);
      fair[q] += give;
      remaining -= give;
    }
  }
}

void divide_fair_share_tree(const double* total, const QueueTreeInput& tree, double k_value,
                            double* fair) {
  const std::size_t nq = tree.num_queues;
  const std::size_t nr = tree.num_resources;
  std::fill(fair, fair + nq * nr, 0.0);
  // children[nq] holds the root's children.
  std::vector<std::vector<std::size_t>> children(nq + 1);
  for (std::size_t q = 0; q < nq; ++q) {
    const std::int64_t p = tree.parent[q];
    const bool queue = p >= 0 && static_cast<std::size_t>(p) < nq;
    children[queue ? static_cast<std::size_t>(p) : nq].push_back(q);
  }
  for (auto& kids : children) {
    std::stable_sort(kids.begin(), kids.end(), [&](std::size_t a, std::size_t b) {
      return tree.rank[a] < tree.rank[b];
    });
  }
  std::vector<double> deserved, limit, weight, request, usage, out;
  std::vector<std::int64_t> priority, rank;
  // Breadth first from the root: a parent's fair share is made before its children's.
  std::vector<std::size_t> todo{nq};
  for (std::size_t i = 0; i < todo.size(); ++i) {
    const std::size_t parent = todo[i];
    const auto& kids = children[parent];
    if (kids.empty()) continue;
    const std::size_t k = kids.size();
    for (auto* v : {&deserved, &limit, &weight, &request, &usage, &out}) v->resize(k);
    priority.resize(k);
    rank.resize(k);
    for (std::size_t j = 0; j < k; ++j) {
      priority[j] = tree.priority[kids[j]];
      rank[j] = tree.rank[kids[j]];
    }
    QueueShareInput group;
    group.num_queues = k;
    group.deserved = deserved.data();
    group.limit = limit.data();
    group.weight = weight.data();
    group.request = request.data();
    group.priority = priority.data();
    group.rank = rank.data();
    group.usage = usage.data();
    for (std::size_t r = 0; r < nr; ++r) {
      const std::size_t row = r * nq;
      for (std::size_t j = 0; j < k; ++j) {
        const std::size_t q = row + kids[j];
        deserved[j] = tree.deserved[q];
        limit[j] = tree.limit[q];
        weight[j] = tree.weight[q];
        request[j] = tree.request[q];
        usage[j] = tree.usage[q];
      }
      const double amount = parent == nq ? total[r] : fair[row + parent];
      divide_fair_share(amount, group, k_value, out.data());
      for (std::size_t j = 0; j < k; ++j) fair[row + kids[j]] = out[j];
    }
    todo.insert(todo.end(), kids.begin(), kids.end());
  }
}

}  // namespace kai::fairshare
