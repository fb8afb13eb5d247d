// kai native core: capacity checks of the victim-search solver.
#pragma once

#include <cstddef>

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

}  // namespace kai::solver
