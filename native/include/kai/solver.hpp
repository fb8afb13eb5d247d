// kai native core: capacity checks of the victim-search solver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kai/common.hpp"

namespace kai::solver {

/// AccumulatedIdleGpus filter: can the pending tasks' GPU needs be matched to nodes?
///
/// capacity[n] = idle + releasing GPUs of node n plus the GPUs freed by the scenario's
/// victims on it.  Only the top-k nodes by capacity take part (k = number of requests;
/// ties: smaller index first).  Requests are taken largest first; each goes to the first
/// of those nodes (largest capacity first) whose remaining capacity covers it.  A request
/// of 0 ends the check successfully (the rest are smaller or equal).
bool idle_gpus_fit(const double* capacity, std::size_t num_nodes, const double* requests,
                   std::size_t num_requests);

/// Incremental per-node fit of a scenario over all resources.
///
/// available: [num_nodes x num_resources] idle + releasing + freed by victims.
/// requests: [num_tasks x num_resources].  Tasks are taken by GPU request descending
/// (stable); nodes by available GPUs descending (ties: smaller index).  Each task goes to
/// the first node where every resource fits (request <= available + EPS), which is then
/// charged.  Returns whether every task was placed.
bool scenario_fit(const double* available, std::size_t num_nodes, std::size_t num_resources,
                  const double* requests, std::size_t num_tasks, std::size_t gpu_column);

/// Both filters above over arrays that change by small steps (victims add freed capacity to
/// a few nodes per accumulation step): the nodes are kept sorted (by GPU capacity for
/// idle_gpus_fit, by available GPUs for scenario_fit; ties: smaller index) across steps,
/// and only the nodes changed since the last check are moved.  Every check gives exactly
/// what the stateless kernel gives on the current arrays; scenario_fit leaves out the
/// nodes whose available GPUs (+ EPS) are below the smallest GPU request when that is > 0.
class IncrementalFit {
 public:
  IncrementalFit(const double* capacity, std::size_t num_nodes, const double* available,
                 std::size_t num_resources, const double* gpu_requests, std::size_t num_gpu,
                 const double* requests, std::size_t num_tasks, std::size_t gpu_column);

  /// capacity[nodes[i]] = values[i], in order.
  void set_capacity(const std::int64_t* nodes, const double* values, std::size_t count);
  /// available[nodes[i]] += rows[i], in order (as numpy's add.at).
  void add_available(const std::int64_t* nodes, const double* rows, std::size_t count);

  bool idle_gpus_fit();
  bool scenario_fit();

  std::size_t num_nodes() const { return n_; }
  std::size_t num_resources() const { return r_; }
  const std::vector<double>& capacity() const { return cap_; }
  const std::vector<double>& available() const { return avail_; }

 private:
  struct Order {
    std::vector<std::size_t> idx;  // nodes, value descending, ties index ascending
    std::vector<double> key;       // per node: the value it is sorted by in idx
    std::vector<std::size_t> dirty;
    std::vector<char> marked;
    bool built = false;
  };
  void touch(Order& order, std::size_t node);
  void refresh(Order& order, const double* value, std::size_t stride);

  std::size_t n_, r_, gpu_;
  std::vector<double> cap_;
  std::vector<double> avail_;
  std::vector<double> gpu_req_;  // descending
  std::vector<double> req_;      // task rows, by GPU request descending (stable)
  std::vector<char> same_;       // task row equal to the previous one
  std::size_t tasks_;
  double smallest_ = 0.0;
  Order cap_order_, avail_order_;
  // scratch
  std::vector<double> remaining_;
  std::vector<std::uint32_t> stamp_;
  std::uint32_t epoch_ = 0;
  std::vector<std::size_t> saved_nodes_;
  std::vector<double> saved_rows_;
};

}  // namespace kai::solver
