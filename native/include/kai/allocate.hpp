// kai native core: the allocate action's loop for the built-in plugin set.
//
// One call runs the whole allocate action of a session (queue-tree pop with the
// proportion queue order, job order, gang chunks, capacity checks, per-task node
// selection with the built-in predicates and scorers, rollback, pipelining, elastic
// push-back) on compact arrays that kai.actions.fast_allocate prepares, and returns the
// ordered attempts and placements that the Python side replays.  The semantics are
// those of the Python slow path (kai.actions.allocate); see fast_allocate.py for the
// input layout.  The binding (native/bindings/allocate.cpp) reads the arrays from a dict.
#pragma once

#include <cstdint>
#include <vector>

namespace kai::alloc {

using i64 = std::int64_t;

/// The loop's inputs: sizes and row-major arrays the caller keeps alive during run().
struct Input {
  i64 N = 0, R = 0, T = 0, J = 0, Q = 0, S = 0, P = 0, K = 0, C = 0;
  const double* allocatable = nullptr;
  const double* cap_gpu = nullptr;
  i64 gpu = 2, cpu = 0;
  const bool* pred = nullptr;
  const i64* comps = nullptr;
  const double* comp_scale = nullptr;  // each component's score, from its plugin
  bool gpu_binpack = true, cpu_binpack = true;
  const double* task_req = nullptr;
  const double* task_qvec = nullptr;
  const i64* task_sig = nullptr;
  const i64* task_nom = nullptr;
  const i64* job_start = nullptr;
  const i64* job_leaf = nullptr;
  const i64* job_min = nullptr;
  const i64* job_np_mode = nullptr;
  // Per job: active, non-pipelined, pipelined and allocated-set task counts.
  const i64* job_active = nullptr;
  const i64* job_nonpipe = nullptr;
  const i64* job_pipelined = nullptr;
  const i64* job_allocset = nullptr;
  const i64* job_key = nullptr;
  const i64* key_kinds = nullptr;
  i64 max_depth = -1;
  const i64* q_path_start = nullptr;
  const i64* q_path = nullptr;
  const double* q_deserved = nullptr;
  const double* q_limit = nullptr;
  const double* q_fair = nullptr;
  const double* q_allocatable = nullptr;
  const i64* q_priority = nullptr;
  const i64* q_rank = nullptr;
  const double* total = nullptr;
};

struct Output {
  std::vector<double> idle, releasing, used, q_alloc, q_alloc_np;
  std::vector<i64> q_events;
  std::vector<i64> att_job, att_kind, att_first, att_count, att_info, att_flags, att_active;
  std::vector<double> att_vec;
  std::vector<i64> att_fail;
  // Per attempt and resource: the nodes short of it and the most any of them had free.
  std::vector<i64> att_short;
  std::vector<double> att_free;
  std::vector<i64> pl_task, pl_node, pl_pipe;
};

/// Runs the loop.  ``out`` enters with the node matrices (idle, releasing, used) and the
/// queue allocations (q_alloc, q_alloc_np) as they are, and leaves with them as the loop
/// left them, plus the attempts and placements in order.
void run(const Input& in, Output& out);

}  // namespace kai::alloc
