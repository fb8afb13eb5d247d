// kai native core: the proportion plugin's queue rules, for every compiled loop.
//
// The queue order (kai.plugins.proportion.ProportionPlugin.queue_order, without
// victims) and the capacity check of a job's next pods (job_over_capacity: the queue
// limits, then the deserved quota of the non-preemptible part).  The allocate loop
// (allocate.cpp) and the victim-search simulation (simulation.cpp) both call these,
// on the same arrays as kai.plugins.proportion.QueueKernel.
#pragma once

#include <cstdint>

namespace kai::alloc {

using i64 = std::int64_t;

/// What does not change while a loop runs: per queue (Q x 3 rows of cpu, memory, gpu)
/// and the queue tree as paths (root first).
struct QueueRules {
  const double* deserved = nullptr;
  const double* limit = nullptr;
  const double* fair = nullptr;
  const double* allocatable = nullptr;
  const i64* priority = nullptr;
  const i64* rank = nullptr;
  const double* total = nullptr;  // [3]
  const i64* path_start = nullptr;  // [Q + 1]
  const i64* path = nullptr;

  i64 path_len(i64 q) const { return path_start[q + 1] - path_start[q]; }
  const i64* path_of(i64 q) const { return path + path_start[q]; }
};

/// Capacity check outcomes.
enum Capacity : i64 { kFits = 0, kLimit = 2, kQuota = 3 };

/// proportion.queue_order(l, r, ...) for the queues' allocations ``alloc`` (Q x 3) and
/// the next requests of their jobs: < 0 when l goes first, > 0 when r does, else 0.
/// ``lheld`` / ``rheld`` (3 values each, or null for none): what the victims taken so
/// far from each queue hold, which the dominant share with the job leaves out.
int queue_order(const QueueRules& q, const double* alloc, i64 l, i64 r, const double* lreq,
                const double* rreq, const double* lheld = nullptr,
                const double* rheld = nullptr);

/// proportion.job_over_capacity for a job of leaf queue ``leaf`` asking ``request`` (its
/// next pods, summed) of which ``np_request`` is non-preemptible (``has_np``): kFits, or
/// kLimit / kQuota with the queue in ``queue`` and its allocation and the request in
/// ``vec`` (6 values), for the message.
i64 over_capacity(const QueueRules& q, const double* alloc, const double* alloc_np, i64 leaf,
                  const double* request, bool has_np, const double* np_request, i64* queue,
                  double* vec);

}  // namespace kai::alloc
