// kai native core: the proportion plugin's queue rules (see kai/queue_policy.hpp).
//
// Same operations in the same order as kai.plugins.proportion, so the same answers.
#include "kai/queue_policy.hpp"

#include "kai/common.hpp"

namespace kai::alloc {
namespace {

double dominant(const QueueRules& q, i64 queue, const double* vec) {
  double best = 0.0;
  for (int r = 0; r < 3; ++r) {
    double cap = q.allocatable[queue * 3 + r];
    if (cap == UNLIMITED) cap = q.total[r];
    const double value = cap > 0 ? vec[r] / cap : vec[r] * 1000.0;
    if (value > best) best = value;
  }
  return best;
}

bool within_deserved(const QueueRules& q, const double* alloc, i64 queue, const double* req) {
  const double* a = alloc + queue * 3;
  const double* d = q.deserved + queue * 3;
  for (int k = 0; k < 3; ++k) {
    const double total = a[k] + req[k];
    if (!(d[k] == UNLIMITED || total <= d[k] + 1e-9)) return false;
  }
  return true;
}

bool uses_zero(const QueueRules& q, const double* alloc, i64 queue, const double* req) {
  const double* a = alloc + queue * 3;
  const double* c = q.allocatable + queue * 3;
  for (int k = 0; k < 3; ++k) {
    if (c[k] == 0 && a[k] + req[k] > 0) return true;
  }
  return false;
}

// Whether ``request`` takes some queue on leaf's path (leaf first) past its ``bound``
// (limit or deserved quota) over ``alloc``; if so the queue, its allocation and the
// request go to ``queue`` and ``vec``.
bool exceeds(const QueueRules& q, const double* bound, const double* alloc, i64 leaf,
             const double* request, i64* queue, double* vec) {
  const i64* p = q.path_of(leaf);
  for (i64 k = q.path_len(leaf) - 1; k >= 0; --k) {
    const i64 qq = p[k];
    const double* b = bound + qq * 3;
    const double* a = alloc + qq * 3;
    for (int r = 0; r < 3; ++r) {
      if (b[r] != UNLIMITED && request[r] > 0 && b[r] < (a[r] + request[r]) - 1e-9) {
        *queue = qq;
        for (int s = 0; s < 3; ++s) {
          vec[s] = a[s];
          vec[3 + s] = request[s];
        }
        return true;
      }
    }
  }
  return false;
}

}  // namespace

int queue_order(const QueueRules& q, const double* alloc, i64 l, i64 r, const double* lreq,
                const double* rreq, const double* lheld, const double* rheld) {
  static constexpr double kNone[3] = {0.0, 0.0, 0.0};
  if (lheld == nullptr) lheld = kNone;
  if (rheld == nullptr) rheld = kNone;
  const double* la = alloc + l * 3;
  const double* ra = alloc + r * 3;
  const double* lf = q.fair + l * 3;
  const double* rf = q.fair + r * 3;
  bool lover = true, rover = true;
  for (int k = 0; k < 3; ++k) {
    lover = lover && lf[k] < la[k];
    rover = rover && rf[k] < ra[k];
  }
  if (lover != rover) return lover ? 1 : -1;
  const bool lst = within_deserved(q, alloc, l, lreq), rst = within_deserved(q, alloc, r, rreq);
  if (lst != rst) return lst ? -1 : 1;
  const i64 lp = q.priority[l], rp = q.priority[r];
  if (lp != rp) return lp > rp ? -1 : 1;
  const bool lz = uses_zero(q, alloc, l, lreq), rz = uses_zero(q, alloc, r, rreq);
  if (lz != rz) return lz ? 1 : -1;
  double lv[3], rv[3];
  for (int k = 0; k < 3; ++k) {
    // x - 0.0 is x, bit for bit: a queue without victims compares as without the term.
    lv[k] = (la[k] + lreq[k]) - lheld[k];
    rv[k] = (ra[k] + rreq[k]) - rheld[k];
  }
  double lds = dominant(q, l, lv), rds = dominant(q, r, rv);
  if (lds != rds) return lds < rds ? -1 : 1;
  lds = dominant(q, l, la);
  rds = dominant(q, r, ra);
  if (lds != rds) return lds < rds ? -1 : 1;
  const double* lc = q.allocatable + l * 3;
  const double* rc = q.allocatable + r * 3;
  bool all_le = true, any_lt = false, all_ge = true, any_gt = false;
  for (int k = 0; k < 3; ++k) {
    all_le = all_le && lc[k] <= rc[k];
    any_lt = any_lt || lc[k] < rc[k];
    all_ge = all_ge && rc[k] <= lc[k];
    any_gt = any_gt || rc[k] < lc[k];
  }
  if (all_le && any_lt) return -1;
  if (all_ge && any_gt) return 1;
  const i64 lk = q.rank[l], rk = q.rank[r];
  if (lk != rk) return lk < rk ? -1 : 1;
  return 0;
}

i64 over_capacity(const QueueRules& q, const double* alloc, const double* alloc_np, i64 leaf,
                  const double* request, bool has_np, const double* np_request, i64* queue,
                  double* vec) {
  if (exceeds(q, q.limit, alloc, leaf, request, queue, vec)) return kLimit;
  if (has_np && exceeds(q, q.deserved, alloc_np, leaf, np_request, queue, vec)) return kQuota;
  return kFits;
}

}  // namespace kai::alloc
