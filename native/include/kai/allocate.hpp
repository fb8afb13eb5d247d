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
#include <memory>
#include <vector>

namespace kai::alloc {

using i64 = std::int64_t;

/// The loadaware plugin's kernel form (kai.plugins.loadaware.LoadAwareKernel): its
/// filter is the last batch predicate and its score a component (kLoadAware).  Rows of
/// the existing-usage matrices (Output::la_existing) are kept up to date as the loop
/// places pods: a pod placed on a node whose cache counts pods adds, to each profile's
/// row, the delta that row takes (``row_delta``).
struct LoadAware {
  i64 R = 0;  // load-aware resources; 0: the plugin is not in the session
  const i64* allocatable = nullptr;  // [N, R]
  const i64* thresholds = nullptr;   // [2, N, R]: filter profiles (0 any pod, 1 prod pod)
  const i64* state = nullptr;        // [2, N]: kai::loadaware kCheck / kPass / kExpired
  const i64* reason_slot = nullptr;  // [2, N]: reason of resource 0 (+ r for resource r)
  i64 expired_reason = 0;
  i64 reasons = 0;                   // reason slots (failure counts after the predicates')
  const i64* row_delta = nullptr;    // [4, N]: kRowUsage ... kRowProd, per profile row
  const bool* valid = nullptr;       // [N]: scored (fresh metric)
  const i64* weights = nullptr;      // [R]
  i64 dominant_weight = 0;
  const bool* counted = nullptr;     // [N]: the node's cache counts pods (has a metric)
  const i64* estimates = nullptr;    // [T, R]
  const i64* task_flags = nullptr;   // [T]: kProdPod | kNoFilter | kProdScore
};

// Score components (Input::comps), in the order the scorers registered
// (kai.framework.kernel.ScoreKind, declared by the scoring plugins).
enum Comp : i64 {
  kAvail = 1,
  kGpuSharing = 2,
  kResType = 3,
  kNominated = 4,
  kPlacement = 5,
  kLoadAware = 6,
};
// At most one component of each kind (each comes from its own plugin).
inline constexpr i64 kMaxComponents = 6;

// LoadAware::task_flags bits.
inline constexpr i64 kProdPod = 1;    // a koord-prod pod: filter profile 1, prod deltas
inline constexpr i64 kNoFilter = 2;   // a DaemonSet pod: never filtered
inline constexpr i64 kProdScore = 4;  // scored on the prod profile (3) instead of 2
// LoadAware::row_delta kinds: which delta of a placed pod a profile row takes.
inline constexpr i64 kRowUsage = 0;      // node usage + delta: max(estimate, 0)
inline constexpr i64 kRowAggregated = 1; // aggregated usage + delta: max(estimate, 0)
inline constexpr i64 kRowEstimated = 2;  // the estimates alone: estimate
inline constexpr i64 kRowProd = 3;       // prod usage + prod delta: estimate of prod pods

/// Shared GPU devices (fractional tasks): the devices shared at the session's start,
/// each task's fraction, and the GPU order plugins.  A task of fraction p > 0 has no
/// GPU in its request: it takes p of a shared device of its node, or opens a whole
/// free device as a new shared one (kai.api.model.NodeTable's GPU groups).
struct SharedGpus {
  bool on = false;
  i64 G = 0;                               // groups at the start, node by node in order
  const i64* group_node = nullptr;         // [G]
  const double* group_used = nullptr;      // [G]
  const double* group_releasing = nullptr; // [G]
  const double* group_pipelined = nullptr; // [G]
  const i64* group_tenants = nullptr;      // [G]
  const bool* group_from_releasing = nullptr;  // [G]
  const double* free_idle = nullptr;       // [N]: the most room on a busy shared device
  const double* free_any = nullptr;        // [N]: ... counting what is being released
  const double* task_portion = nullptr;    // [T]: fraction of a device (0: whole GPUs)
  i64 orders = 0;                          // GPU order scores, in registration order:
  const i64* order_kinds = nullptr;        // kGpuPack (used) or kGpuSpread (1 - used)
};
inline constexpr i64 kGpuPack = 1;
inline constexpr i64 kGpuSpread = 2;

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
  LoadAware la;
  SharedGpus sg;
  const bool* within = nullptr;  // [N]: the nodes a task may go to (nullptr: all)
  // The nodes ``within`` admits, ascending, for a caller that picks many times on one
  // mask: scoring then visits only them (nullptr: every node is visited).
  const i64* within_nodes = nullptr;
  i64 within_count = 0;
};

struct Output {
  std::vector<double> idle, releasing, used, q_alloc, q_alloc_np;
  std::vector<i64> q_events;
  std::vector<i64> att_job, att_kind, att_first, att_count, att_info, att_flags, att_active;
  // The rest of att_ has a row per failed attempt (kind over limit, over quota or no
  // node), in attempt order: what its message reads.  Per capacity refusal: the queue's
  // allocation and the request (6).  Per resource failure: the failure counts, and per
  // resource the nodes short of it and the most any of them had free.
  std::vector<double> att_vec;
  std::vector<i64> att_fail;
  std::vector<i64> att_short;
  std::vector<double> att_free;
  std::vector<i64> pl_task, pl_node, pl_pipe;
  // [4, N, LoadAware::R]: existing usage per profile (filter 0/1, score 0/1 = 2/3).
  std::vector<i64> la_existing;
  // Shared GPUs: per placement its device (-1: a whole-GPU task); per device (the
  // devices at the start, then those opened, in the order opened) its node, state and
  // the position it last got in its node's order (seq; a device closed is not alive),
  // and the task that opened it (-1: one of the start).  Per failed attempt (its row
  // above; a capacity refusal's is 0): the nodes with no room on a device for the
  // task's fraction, and the most room any of them had.
  std::vector<i64> pl_group;
  std::vector<i64> sg_node, sg_tenants, sg_seq, sg_opener;
  std::vector<double> sg_used, sg_releasing, sg_pipelined;
  std::vector<char> sg_from_releasing, sg_alive;
  std::vector<i64> att_device_short;
  std::vector<double> att_device_room;
  // The loop stopped on a case it does not take: the caller runs the slow path.
  bool aborted = false;
};

/// Runs the loop.  ``out`` enters with the node matrices (idle, releasing, used) and the
/// queue allocations (q_alloc, q_alloc_np) as they are, and leaves with them as the loop
/// left them, plus the attempts and placements in order.
void run(const Input& in, Output& out);

/// The node the loop would choose for task 0 of ``in`` (T = 1; no load-aware form), -1
/// when none may take it, and in ``on_idle`` whether it fits there on idle capacity.
/// ``idle`` and ``releasing`` are the node matrices (N x R) as they are now; they are
/// only read.
i64 select_node(const Input& in, const double* idle, const double* releasing, bool* on_idle);

/// select_node for one task after another, keeping the loop's scratch between the
/// calls: ``in`` is referenced and read again at each call (its task fields change).
class NodeChooser {
 public:
  explicit NodeChooser(const Input& in);
  ~NodeChooser();
  NodeChooser(const NodeChooser&) = delete;
  NodeChooser& operator=(const NodeChooser&) = delete;
  i64 choose(const double* idle, const double* releasing, bool* on_idle);
  // The same choice, the nodes grouped by score inputs per class of tasks alike (as the
  // allocate loop does): for a caller that picks many tasks on the same matrices and
  // reports each node whose rows it changes between picks (changed()).
  i64 choose_alike(const double* idle, const double* releasing, bool* on_idle);
  void changed(i64 n);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kai::alloc
