// kai native core: the allocate action's loop (see kai/allocate.hpp and
// src/kai/actions/fast_allocate.py, which prepares the inputs and replays the result).
//
// Floating-point contract: every quantity the Python slow path computes and compares
// (node idle/releasing/used, queue allocated, queue-order shares, node scores) is
// computed here with the same operations in the same order, so that every decision
// and every final value is bit-identical.
#include "kai/allocate.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "kai/common.hpp"
#include "kai/loadaware.hpp"
#include "kai/queue_policy.hpp"

namespace kai::alloc {
namespace {

using u64 = std::uint64_t;

// Attempt kinds.
enum Kind : i64 { kOk = 0, kNoTasks = 1, kOverLimit = 2, kOverQuota = 3, kNoNode = 4 };

constexpr int kMaxBuckets = 4096;

// A node's score inputs (Loop::score_inputs): per score component the value it adds,
// or binpack's free amount; the last slot says whether the node has binpack's resource.
constexpr int kMaxInputs = kMaxComponents + 1;
using ScoreInputs = std::array<double, kMaxInputs>;

struct InputsHash {
  std::size_t operator()(const ScoreInputs& k) const noexcept {
    u64 h = 1469598103934665603ULL;
    for (double v : k) {
      u64 bits;
      std::memcpy(&bits, &v, sizeof bits);
      h = (h ^ bits) * 1099511628211ULL;
    }
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};
struct InputsEq {
  bool operator()(const ScoreInputs& a, const ScoreInputs& b) const noexcept {
    return std::memcmp(a.data(), b.data(), sizeof(ScoreInputs)) == 0;
  }
};


class Loop {
 public:
  Loop(const Input& in, Output& out)
      : in_(in),
        out_(out),
        idle_m_(out.idle.data()),
        rel_m_(out.releasing.data()),
        used_m_(out.used.data()) {
    rules_.deserved = in.q_deserved;
    rules_.limit = in.q_limit;
    rules_.fair = in.q_fair;
    rules_.allocatable = in.q_allocatable;
    rules_.priority = in.q_priority;
    rules_.rank = in.q_rank;
    rules_.total = in.total;
    rules_.path_start = in.q_path_start;
    rules_.path = in.q_path;
  }

  // Read the node matrices from these (N x R) instead of ``out``: the one-task choice
  // (select_node), which writes none of them, reads the caller's own.
  void read_matrices(const double* idle, const double* releasing) {
    idle_m_ = const_cast<double*>(idle);
    rel_m_ = const_cast<double*>(releasing);
  }

  void run() {
    init();
    queue_jobs();
    while (!out_.aborted) {
      i64 j = pop();
      if (j < 0) break;
      attempt(j);
    }
  }

 private:
  const Input& in_;
  Output& out_;
  QueueRules rules_;
  // The node matrices (N x R): out_'s, or the caller's for select_node.
  double* idle_m_;
  double* rel_m_;
  double* used_m_;
  // jobs
  std::vector<i64> ptr_, active_, nonpipe_, pipelined_, allocset_, cur_key_;
  std::vector<double> jreq_;
  std::vector<char> jreq_ok_;
  // Per leaf queue, its jobs in job order: the ones queued at the start sorted once
  // (run_[run_pos_, run_end_), taken from the front) and the ones queued again after an
  // attempt in a heap.  The order is total (the last key is unique), so this pops the
  // same sequence as one heap, without sifting each pop through the whole leaf.
  std::vector<i64> heap_off_, heap_size_, heap_, run_, run_pos_, run_end_;
  std::vector<char> heap_made_;
  std::vector<std::vector<i64>> kids_;  // index Q = the roots
  // best(q) per queue, kept until a change under q: a pop, push or charge touches
  // only the queues on its job's path, and every other queue's best stays what it was.
  std::vector<char> memo_ok_;
  std::vector<i64> memo_job_;
  // node selection scratch
  std::vector<i64> cand_;
  std::vector<ScoreInputs> cand_inputs_;
  // node groups (select_any)
  struct ClassGroups;
  std::vector<double> class_;
  std::vector<std::unique_ptr<ClassGroups>> class_groups_;
  std::vector<std::pair<std::vector<double>, bool>> seen_;  // classes seen, groupable
  i64 select_count_ = 0;
  bool alike_ready_ = false;  // select_one_alike's one-time set-up done
  // bucket index (free GPUs -> nodes), valid while index_on_
  bool index_on_ = false;
  bool releasing_zero_ = false;
  i64 nb_ = 0, words_ = 0;
  std::vector<u64> bits_;
  std::vector<i64> bucket_;
  // Per bucket: how many nodes it holds, and a word below which it has no node (a
  // lower bound, raised by scans): a filling cluster leaves most buckets empty or
  // sparse, and scans skip those without reading their words.
  std::vector<i64> bucket_size_, bucket_low_;
  // failure-count cache
  i64 version_ = 0;
  i64 fc_version_ = -1;
  std::vector<i64> fc_counts_;
  std::vector<i64> fc_short_;
  std::vector<double> fc_free_;
  std::vector<double> fc_class_;  // the task class (task_class) the counts are for
  // loadaware
  bool la_on_ = false;
  i64 la_den_ = 0;
  // shared GPUs: per node its devices (handles into out_.sg_*) in the order
  // NodeTable.gpu_groups keeps them, and the most room on one of them
  bool sg_on_ = false;
  std::vector<std::vector<i64>> node_groups_;
  std::vector<double> shared_idle_, shared_any_;
  i64 next_seq_ = 0;
  std::vector<i64> group_cands_;
  i64 fc_device_short_ = 0;
  double fc_device_room_ = 0.0;

  // ------------------------------------------------------------------ helpers
  const double* req(i64 t) const { return in_.task_req + t * in_.R; }
  const double* qvec(i64 t) const { return in_.task_qvec + t * 3; }
  double* idle(i64 n) { return idle_m_ + n * in_.R; }
  double* rel(i64 n) { return rel_m_ + n * in_.R; }
  double* used(i64 n) { return used_m_ + n * in_.R; }
  const bool* pmask(i64 sig, i64 p) const { return in_.pred + (sig * in_.P + p) * in_.N; }
  i64 path_len(i64 q) const { return in_.q_path_start[q + 1] - in_.q_path_start[q]; }
  const i64* path(i64 q) const { return in_.q_path + in_.q_path_start[q]; }

  void init() {
    const i64 J = in_.J, K = in_.K, Q = in_.Q;
    ptr_.assign(in_.job_start, in_.job_start + J);
    cur_key_.assign(static_cast<std::size_t>(J * (K > 0 ? K : 1)), 0);
    jreq_.assign(static_cast<std::size_t>(J * 3), 0.0);
    jreq_ok_.assign(static_cast<std::size_t>(J), 0);
    heap_off_.assign(static_cast<std::size_t>(Q + 1), 0);
    heap_size_.assign(static_cast<std::size_t>(Q), 0);
    heap_made_.assign(static_cast<std::size_t>(Q), 0);
    for (i64 j = 0; j < J; ++j) {
      const i64 q = in_.job_leaf[j];
      if (q >= 0) heap_off_[q + 1] += 1;
    }
    for (i64 q = 0; q < Q; ++q) heap_off_[q + 1] += heap_off_[q];
    heap_.assign(static_cast<std::size_t>(heap_off_[Q] > 0 ? heap_off_[Q] : 1), 0);
    run_ = heap_;
    run_pos_.assign(heap_off_.begin(), heap_off_.end() - 1);
    run_end_ = run_pos_;
    kids_.assign(static_cast<std::size_t>(Q + 1), {});
    memo_ok_.assign(static_cast<std::size_t>(Q), 0);
    memo_job_.assign(static_cast<std::size_t>(Q), -1);
    cand_.reserve(static_cast<std::size_t>(in_.N));
    out_.q_events.assign(static_cast<std::size_t>(Q), 0);
    fc_counts_.assign(static_cast<std::size_t>(1 + in_.P), 0);
    fc_short_.assign(static_cast<std::size_t>(in_.R), 0);
    fc_free_.assign(static_cast<std::size_t>(in_.R), 0.0);
    const LoadAware& la = in_.la;
    la_on_ = la.R > 0;
    if (la_on_) {
      fc_counts_.assign(static_cast<std::size_t>(1 + in_.P + la.reasons), 0);
      la_den_ = la.dominant_weight;
      for (i64 r = 0; r < la.R; ++r) la_den_ += la.weights[r];
    }
    reserve_outputs();
    init_shared();
    init_index();
  }

  // Every job is attempted at least once and every task placed at most once (a gang
  // chunked into several attempts only adds a few): sized up front, the per-attempt
  // rows do not reallocate and copy as they grow.  The failure rows get the same room,
  // which costs no memory until a failure's row is written.
  void reserve_outputs() {
    const auto J = static_cast<std::size_t>(in_.J);
    const auto R = static_cast<std::size_t>(in_.R);
    for (auto* v : {&out_.att_job, &out_.att_kind, &out_.att_first, &out_.att_count,
                    &out_.att_info, &out_.att_flags, &out_.att_active, &out_.att_device_short})
      v->reserve(J);
    out_.att_device_room.reserve(J);
    out_.att_vec.reserve(6 * J);
    out_.att_fail.reserve(fc_counts_.size() * J);
    out_.att_short.reserve(R * J);
    out_.att_free.reserve(R * J);
    const auto T = static_cast<std::size_t>(in_.T);
    for (auto* v : {&out_.pl_task, &out_.pl_node, &out_.pl_pipe, &out_.pl_group}) v->reserve(T);
  }

  void init_shared() {
    const SharedGpus& sg = in_.sg;
    sg_on_ = sg.on;
    if (!sg_on_) return;
    const auto N = static_cast<std::size_t>(in_.N);
    node_groups_.assign(N, {});
    shared_idle_.assign(sg.free_idle, sg.free_idle + N);
    shared_any_.assign(sg.free_any, sg.free_any + N);
    for (i64 h = 0; h < sg.G; ++h) {
      out_.sg_node.push_back(sg.group_node[h]);
      out_.sg_used.push_back(sg.group_used[h]);
      out_.sg_releasing.push_back(sg.group_releasing[h]);
      out_.sg_pipelined.push_back(sg.group_pipelined[h]);
      out_.sg_tenants.push_back(sg.group_tenants[h]);
      out_.sg_from_releasing.push_back(sg.group_from_releasing[h] ? 1 : 0);
      out_.sg_alive.push_back(1);
      out_.sg_seq.push_back(next_seq_++);
      out_.sg_opener.push_back(-1);
      node_groups_[static_cast<std::size_t>(sg.group_node[h])].push_back(h);
    }
  }

  // --------------------------------------------------------------- bucket index
  void init_index() {
    const i64 N = in_.N, R = in_.R, g = in_.gpu;
    releasing_zero_ = true;
    for (i64 i = 0; i < N * R; ++i) {
      if (rel_m_[i] != 0.0) releasing_zero_ = false;
    }
    // Load-aware filters and scores move the choice off the lowest free-GPU bucket.
    index_on_ = releasing_zero_ && in_.gpu_binpack && N > 0 && !la_on_;
    if (!index_on_) return;
    double hi = 0.0;
    for (i64 n = 0; n < N; ++n) {
      const double na = idle(n)[g] + rel(n)[g];
      if (!(na >= 0.0) || na != std::floor(na) || na >= kMaxBuckets - 1) {
        index_on_ = false;
        return;
      }
      if (in_.allocatable[n * R + g] <= 0.0 && na > 0.0) {
        index_on_ = false;
        return;
      }
      if (na > hi) hi = na;
    }
    nb_ = static_cast<i64>(hi) + 1;
    words_ = (N + 63) / 64;
    bits_.assign(static_cast<std::size_t>(nb_ * words_), 0);
    bucket_.assign(static_cast<std::size_t>(N), -1);
    bucket_size_.assign(static_cast<std::size_t>(nb_), 0);
    bucket_low_.assign(static_cast<std::size_t>(nb_), words_);
    for (i64 n = 0; n < N; ++n) {
      const i64 b = static_cast<i64>(idle(n)[g] + rel(n)[g]);
      bucket_[n] = b;
      set_bit(b, n);
    }
  }

  void set_bit(i64 b, i64 n) {
    bits_[b * words_ + n / 64] |= u64{1} << (n % 64);
    bucket_size_[b] += 1;
    if (n / 64 < bucket_low_[b]) bucket_low_[b] = n / 64;
  }

  void clear_bit(i64 b, i64 n) {
    bits_[b * words_ + n / 64] &= ~(u64{1} << (n % 64));
    bucket_size_[b] -= 1;
  }

  // Keep the index in step with node n's free GPUs (or turn it off).
  void touched(i64 n) {
    ++version_;
    group_touched(n);
    if (!index_on_) return;
    const i64 g = in_.gpu;
    const double na = idle(n)[g] + rel(n)[g];
    if (!(na >= 0.0) || na != std::floor(na) || na >= static_cast<double>(nb_)) {
      index_on_ = false;
      return;
    }
    const i64 b = static_cast<i64>(na);
    const i64 old = bucket_[n];
    if (b == old) return;
    clear_bit(old, n);
    set_bit(b, n);
    bucket_[n] = b;
  }

  void releasing_changed() {
    releasing_zero_ = false;
    index_on_ = false;
  }

  // ------------------------------------------------------------------ job order
  i64 elastic_state(i64 j) const {
    const i64 a = active_[j], m = in_.job_min[j];
    if (a < m) return 0;
    return a == m ? 1 : 2;
  }

  bool job_less(i64 a, i64 b) const {
    const i64 K = in_.K;
    for (i64 k = 0; k < K; ++k) {
      const i64 x = cur_key_[a * K + k], y = cur_key_[b * K + k];
      if (x != y) return x < y;
    }
    return a < b;  // never reached: the last key is the job's unique default rank
  }

  i64 queued(i64 leaf) const { return run_end_[leaf] - run_pos_[leaf] + heap_size_[leaf]; }

  // Whether j may join its leaf (linked into the tree on its first job), its key set.
  bool admit(i64 j, i64 leaf) {
    if (!heap_made_[leaf]) {
      heap_made_[leaf] = 1;
      link(leaf);
    }
    if (in_.max_depth >= 0 && queued(leaf) >= in_.max_depth) return false;
    const i64 K = in_.K;
    for (i64 k = 0; k < K; ++k) {
      cur_key_[j * K + k] = in_.key_kinds[k] == 1 ? elastic_state(j) : in_.job_key[j * K + k];
    }
    return true;
  }

  // Every job, in input order (which decides the leaves' order among equals in the
  // tree and, under max_depth, which jobs are queued), then each leaf sorted.
  void queue_jobs() {
    for (i64 j = 0; j < in_.J; ++j) {
      const i64 leaf = in_.job_leaf[j];
      if (leaf >= 0 && admit(j, leaf)) run_[run_end_[leaf]++] = j;
    }
    for (i64 q = 0; q < in_.Q; ++q) {
      std::sort(run_.begin() + run_pos_[q], run_.begin() + run_end_[q],
                [this](i64 a, i64 b) { return job_less(a, b); });
    }
  }

  // j queued again after an attempt (no queue: never reachable from the tree).
  void push(i64 j) {
    const i64 leaf = in_.job_leaf[j];
    if (leaf < 0 || !admit(j, leaf)) return;
    i64* h = heap_.data() + heap_off_[leaf];
    i64 i = heap_size_[leaf]++;
    h[i] = j;
    while (i > 0) {
      const i64 p = (i - 1) / 2;
      if (!job_less(h[i], h[p])) break;
      std::swap(h[i], h[p]);
      i = p;
    }
  }

  // The leaf's first job (-1: none).
  i64 leaf_top(i64 leaf) const {
    const i64 r = run_pos_[leaf] < run_end_[leaf] ? run_[run_pos_[leaf]] : -1;
    if (heap_size_[leaf] == 0) return r;
    const i64 h = heap_[heap_off_[leaf]];
    return r >= 0 && job_less(r, h) ? r : h;
  }

  i64 leaf_pop(i64 leaf) {
    const i64 top = leaf_top(leaf);
    if (run_pos_[leaf] < run_end_[leaf] && run_[run_pos_[leaf]] == top) {
      ++run_pos_[leaf];
      return top;
    }
    return heap_pop(leaf);
  }

  i64 heap_pop(i64 leaf) {
    i64* h = heap_.data() + heap_off_[leaf];
    const i64 top = h[0];
    const i64 n = --heap_size_[leaf];
    if (n > 0) {
      h[0] = h[n];
      i64 i = 0;
      for (;;) {
        const i64 l = 2 * i + 1, r = l + 1;
        i64 m = i;
        if (l < n && job_less(h[l], h[m])) m = l;
        if (r < n && job_less(h[r], h[m])) m = r;
        if (m == i) break;
        std::swap(h[i], h[m]);
        i = m;
      }
    }
    return top;
  }

  void link(i64 leaf) {
    const i64* p = path(leaf);
    const i64 len = path_len(leaf);
    i64 parent = in_.Q;  // the roots
    for (i64 k = 0; k < len; ++k) {
      auto& kids = kids_[static_cast<std::size_t>(parent)];
      bool found = false;
      for (i64 c : kids) found = found || c == p[k];
      if (!found) kids.push_back(p[k]);
      parent = p[k];
    }
  }

  // ----------------------------------------------------------------- queue order
  const double* job_request(i64 j) {
    double* out = jreq_.data() + j * 3;
    if (!jreq_ok_[j]) {
      i64 first, count;
      chunk(j, &first, &count);
      out[0] = out[1] = out[2] = 0.0;
      for (i64 t = first; t < first + count; ++t) {
        for (int r = 0; r < 3; ++r) out[r] = out[r] + qvec(t)[r];
      }
      jreq_ok_[j] = 1;
    }
    return out;
  }

  // proportion.queue_order(left, right, left_job, right_job) without victims.
  int queue_order(i64 l, i64 r, i64 lj, i64 rj) {
    return kai::alloc::queue_order(rules_, out_.q_alloc.data(), l, r, job_request(lj),
                                   job_request(rj));
  }

  // Best (queue-at-this-level's subtree) job of queue q; -1 when empty.
  i64 best(i64 q) {
    if (memo_ok_[q]) return memo_job_[q];
    i64 result;
    if (queued(q) > 0) {
      result = leaf_top(q);
    } else {
      i64 leaf_unused;
      result = best_among(q, &leaf_unused);
    }
    memo_ok_[q] = 1;
    memo_job_[q] = result;
    return result;
  }

  // Best among the children of `parent` (Q = the roots); returns the job, -1 if none.
  i64 best_among(i64 parent, i64* best_child) {
    i64 best_job = -1, best_name = -1;
    for (i64 c : kids_[static_cast<std::size_t>(parent)]) {
      const i64 cand = best(c);
      if (cand < 0) continue;
      if (best_job < 0 || queue_order(c, best_name, cand, best_job) < 0) {
        best_job = cand;
        best_name = c;
      }
    }
    *best_child = best_name;
    return best_job;
  }

  i64 pop() {
    i64 child;
    const i64 j = best_among(in_.Q, &child);
    if (j < 0) return -1;
    // Until the next pop only j's attempt changes anything: its leaf's heap and the
    // allocation of the queues on its path.
    const i64 leaf = in_.job_leaf[j];
    const i64* p = path(leaf);
    for (i64 k = path_len(leaf) - 1; k >= 0; --k) memo_ok_[static_cast<std::size_t>(p[k])] = 0;
    return leaf_pop(leaf);
  }

  // ------------------------------------------------------------------- chunks
  void chunk(i64 j, i64* first, i64* count) const {
    const i64 start = ptr_[j], end = in_.job_start[j + 1];
    const i64 pending = end - start;
    const i64 a = active_[j], m = in_.job_min[j];
    i64 n = a < m ? m - a : 1;
    if (n > pending) n = pending;
    if (n < 0) n = 0;
    *first = start;
    *count = n;
  }

  bool np_charge(i64 j, bool placed) const {
    const i64 mode = in_.job_np_mode[j];
    if (mode != 2) return mode == 1;
    return placed ? active_[j] <= in_.job_min[j] : active_[j] < in_.job_min[j];
  }

  void charge(i64 j, i64 t, int sign, bool np) {
    const i64 leaf = in_.job_leaf[j];
    const i64* p = path(leaf);
    const double* v = qvec(t);
    for (i64 k = path_len(leaf) - 1; k >= 0; --k) {
      const i64 q = p[k];
      double* a = out_.q_alloc.data() + q * 3;
      double* anp = out_.q_alloc_np.data() + q * 3;
      for (int r = 0; r < 3; ++r) {
        const double d = sign > 0 ? v[r] : -v[r];
        a[r] = a[r] + d;
        if (np) anp[r] = anp[r] + d;
      }
      out_.q_events[static_cast<std::size_t>(q)] += 1;
    }
  }

  // Returns the kind (kOk, kOverLimit, kOverQuota) and fills info/vec for the message.
  i64 over_capacity(i64 j, i64 first, i64 count, i64* queue, double* vec) {
    double request[3] = {0.0, 0.0, 0.0};
    for (i64 t = first; t < first + count; ++t) {
      for (int r = 0; r < 3; ++r) request[r] = request[r] + qvec(t)[r];
    }
    // non_preemptible_part
    i64 np_count;
    const i64 mode = in_.job_np_mode[j];
    if (mode == 0) {
      np_count = 0;
    } else if (mode == 1) {
      np_count = count;
    } else {
      const i64 room = in_.job_min[j] - active_[j];
      np_count = room < 0 ? 0 : (room < count ? room : count);
    }
    double npreq[3] = {0.0, 0.0, 0.0};
    for (i64 t = first; t < first + np_count; ++t) {
      for (int r = 0; r < 3; ++r) npreq[r] = npreq[r] + qvec(t)[r];
    }
    const i64 kind =
        kai::alloc::over_capacity(rules_, out_.q_alloc.data(), out_.q_alloc_np.data(),
                                  in_.job_leaf[j], request, np_count > 0, npreq, queue, vec);
    return kind == kLimit ? kOverLimit : kind == kQuota ? kOverQuota : kOk;
  }

  // ---------------------------------------------------------- node selection
  bool fits(const double* rq, i64 n, bool idle_only) {
    const double* id = idle(n);
    const double* rl = rel(n);
    for (i64 r = 0; r < in_.R; ++r) {
      if (!room(rq[r], id, rl, r, idle_only)) return false;
    }
    return true;
  }

  // Whether resource r of a node (idle row ``id``, releasing row ``rl``) has room for
  // ``q`` of it: on idle capacity alone, or on idle and releasing.
  static bool room(double q, const double* id, const double* rl, i64 r, bool idle_only) {
    if (q == 0.0) return true;
    return idle_only ? q <= id[r] + EPS : q <= (id[r] + rl[r]) + EPS;
  }

  bool passes(i64 sig, i64 n) const {
    for (i64 p = 0; p < in_.P; ++p) {
      if (!pmask(sig, p)[n]) return false;
    }
    return true;
  }

  bool requests_gpu(i64 t) const { return req(t)[in_.gpu] > 0 || shared_task(t); }

  // ---------------------------------------------------------------- shared GPUs
  double portion(i64 t) const { return sg_on_ ? in_.sg.task_portion[t] : 0.0; }
  bool shared_task(i64 t) const { return portion(t) > 0.0; }

  enum GroupState { kEmpty, kReleasing, kBusy };

  // GpuGroup.state()
  GroupState group_state(i64 h) const {
    const auto k = static_cast<std::size_t>(h);
    if (out_.sg_tenants[k] == 0) return kEmpty;
    if (out_.sg_releasing[k] >= out_.sg_used[k] - 1e-9 && out_.sg_pipelined[k] <= 1e-9) {
      return kReleasing;
    }
    return kBusy;
  }
  double group_free_idle(i64 h) const { return 1.0 - out_.sg_used[static_cast<std::size_t>(h)]; }
  double group_free_any(i64 h) const {
    const auto k = static_cast<std::size_t>(h);
    return (1.0 - out_.sg_used[k]) + out_.sg_releasing[k];
  }

  // Session._shared_gpu_fit for task t on node n: a device with room for its fraction
  // (on idle capacity alone with idle_only).
  bool shared_fits(i64 t, i64 n, bool idle_only) const {
    const double p = portion(t);
    const bool valid = p > 0.0 && p <= 1.0 + 1e-9;
    const double id = idle_m_[n * in_.R + in_.gpu];
    const double rl = rel_m_[n * in_.R + in_.gpu];
    const bool whole_any = id + rl >= 1.0 - 1e-9;
    const bool whole_idle = id >= 1.0 - 1e-9 && whole_any;
    const auto k = static_cast<std::size_t>(n);
    const bool idle_ok = valid && (whole_idle || shared_idle_[k] + 1e-9 >= p);
    if (idle_only) return idle_ok;
    return idle_ok || (valid && (whole_any || shared_any_[k] + 1e-9 >= p));
  }

  // Whether task t fits node n's resources (filter_nodes' fits_any / fits_idle).
  bool fits_task(i64 t, i64 n, bool idle_only) {
    return fits(req(t), n, idle_only) && (!shared_task(t) || shared_fits(t, n, idle_only));
  }

  // NodeTable._charge_group_state: a shared device counts as one GPU.
  void charge_group_state(i64 n, i64 h, double sign) {
    const GroupState state = group_state(h);
    if (state == kEmpty) return;
    const i64 g = in_.gpu;
    used(n)[g] = used(n)[g] + sign;
    if (state == kReleasing) {
      rel(n)[g] = rel(n)[g] + sign;
      idle(n)[g] = idle(n)[g] - sign;
    } else if (out_.sg_from_releasing[static_cast<std::size_t>(h)]) {
      rel(n)[g] = rel(n)[g] - sign;
    } else {
      idle(n)[g] = idle(n)[g] - sign;
    }
  }

  // NodeTable._refresh_shared_free
  void refresh_shared(i64 n) {
    double best_idle = -1.0, best_any = -1.0;
    for (i64 h : node_groups_[static_cast<std::size_t>(n)]) {
      if (group_state(h) != kBusy) continue;
      best_idle = std::max(best_idle, group_free_idle(h));
      best_any = std::max(best_any, group_free_any(h));
    }
    shared_idle_[static_cast<std::size_t>(n)] = best_idle;
    shared_any_[static_cast<std::size_t>(n)] = best_any;
  }

  // NodeTable._update_group: task t (allocated, or pipelined) joins (sign 1) or leaves
  // (-1) device h of node n; h < 0 opens a new device.  Returns the device.
  i64 update_group(i64 t, i64 n, i64 h, int sign, bool pipelined) {
    if (h < 0) {
      h = static_cast<i64>(out_.sg_node.size());
      out_.sg_node.push_back(n);
      out_.sg_used.push_back(0.0);
      out_.sg_releasing.push_back(0.0);
      out_.sg_pipelined.push_back(0.0);
      out_.sg_tenants.push_back(0);
      out_.sg_from_releasing.push_back(0);
      out_.sg_alive.push_back(0);
      out_.sg_seq.push_back(-1);
      out_.sg_opener.push_back(t);
    }
    const auto k = static_cast<std::size_t>(h);
    if (!out_.sg_alive[k]) {  // (again) a new entry at the end of the node's devices
      out_.sg_used[k] = out_.sg_releasing[k] = out_.sg_pipelined[k] = 0.0;
      out_.sg_tenants[k] = 0;
      out_.sg_from_releasing[k] = pipelined ? 1 : 0;
      out_.sg_alive[k] = 1;
      out_.sg_seq[k] = next_seq_++;
      node_groups_[static_cast<std::size_t>(n)].push_back(h);
    }
    charge_group_state(n, h, -1.0);
    const double p = portion(t);
    out_.sg_used[k] = out_.sg_used[k] + sign * p;
    if (pipelined) out_.sg_pipelined[k] = out_.sg_pipelined[k] + sign * p;
    out_.sg_tenants[k] += sign;
    charge_group_state(n, h, 1.0);
    if (out_.sg_tenants[k] == 0) {
      out_.sg_alive[k] = 0;
      auto& order = node_groups_[static_cast<std::size_t>(n)];
      order.erase(std::find(order.begin(), order.end(), h));
    }
    refresh_shared(n);
    return h;
  }

  // Session.ordered_gpu_groups' first device for task t on node n (-1: a whole free
  // device), and whether it has room on idle capacity; false when there is none.
  bool choose_group(i64 t, i64 n, i64* chosen, bool* device_idle) {
    const double p = portion(t);
    group_cands_.clear();
    for (i64 h : node_groups_[static_cast<std::size_t>(n)]) {
      if (group_state(h) != kBusy) continue;  // a released device is offered whole
      if (group_free_any(h) + 1e-9 >= p) group_cands_.push_back(h);
    }
    const i64 g = in_.gpu;
    if (idle(n)[g] + rel(n)[g] >= 1.0 - 1e-9) group_cands_.push_back(-1);
    if (group_cands_.empty()) return false;
    std::size_t best = 0;
    if (in_.sg.orders > 0 && group_cands_.size() >= 2) {
      double best_score = 0.0;
      for (std::size_t i = 0; i < group_cands_.size(); ++i) {
        const i64 h = group_cands_[i];
        const double group_used = h < 0 ? 0.0 : out_.sg_used[static_cast<std::size_t>(h)];
        double score = 0.0;
        for (i64 o = 0; o < in_.sg.orders; ++o) {
          score = score + (in_.sg.order_kinds[o] == kGpuPack ? group_used : 1.0 - group_used);
        }
        if (i == 0 || score > best_score) {
          best = i;
          best_score = score;
        }
      }
    }
    *chosen = group_cands_[best];
    *device_idle =
        *chosen < 0 ? idle(n)[g] >= 1.0 - 1e-9 : group_free_idle(*chosen) + 1e-9 >= p;
    return true;
  }

  // ------------------------------------------------------------------ loadaware
  i64* la_row(i64 profile, i64 n) {
    return out_.la_existing.data() + (profile * in_.N + n) * in_.la.R;
  }
  const i64* la_estimate(i64 t) const { return in_.la.estimates + t * in_.la.R; }

  // The load-aware filter's code for task t on node n (kai::loadaware::filter_node).
  i64 la_code(i64 t, i64 n) {
    const LoadAware& la = in_.la;
    const i64 flags = la.task_flags[t];
    if (flags & kNoFilter) return loadaware::kCodePass;
    const i64 p = (flags & kProdPod) ? 1 : 0;
    const i64 at = p * in_.N + n;
    return loadaware::filter_node(la_row(p, n), la_estimate(t), la.allocatable + n * la.R,
                                  la.thresholds + at * la.R, la.state[at],
                                  static_cast<std::size_t>(la.R));
  }

  bool la_passes(i64 t, i64 n) { return !la_on_ || la_code(t, n) == loadaware::kCodePass; }

  i64 la_score(i64 t, i64 n) {
    const LoadAware& la = in_.la;
    if (!la.valid[n]) return 0;
    const i64 p = (la.task_flags[t] & kProdScore) ? 3 : 2;
    return loadaware::score_node(la_row(p, n), la_estimate(t), la.allocatable + n * la.R,
                                 la.weights, la.dominant_weight, la_den_,
                                 static_cast<std::size_t>(la.R));
  }

  // Task t's estimate joins (sign 1) or leaves (-1) node n's cached usage.
  void la_account(i64 n, i64 t, i64 sign) {
    const LoadAware& la = in_.la;
    if (!la_on_ || !la.counted[n]) return;
    const i64* e = la_estimate(t);
    const bool prod = (la.task_flags[t] & kProdPod) != 0;
    for (i64 p = 0; p < 4; ++p) {
      const i64 kind = la.row_delta[p * in_.N + n];
      if (kind == kRowProd && !prod) continue;
      i64* row = la_row(p, n);
      for (i64 r = 0; r < la.R; ++r) {
        const i64 d = (kind == kRowUsage || kind == kRowAggregated) ? std::max<i64>(e[r], 0) : e[r];
        row[r] += sign * d;
      }
    }
  }

  // Returns the chosen node (-1: none) and whether the task fits there on idle capacity.
  i64 select(i64 t, bool* on_idle) {
    const double* rq = req(t);
    const i64 sig = in_.task_sig[t];
    const double g = rq[in_.gpu];
    if (index_on_ && g > 0 && g == std::floor(g) && in_.task_nom[t] < 0) {
      const i64 start = static_cast<i64>(g);
      for (i64 b = start; b < nb_; ++b) {
        if (bucket_size_[b] == 0) continue;
        const u64* w = bits_.data() + b * words_;
        i64 k = bucket_low_[b];
        while (k < words_ && w[k] == 0) ++k;
        bucket_low_[b] = k;  // the words below k hold no node of this bucket
        for (; k < words_; ++k) {
          u64 word = w[k];
          while (word) {
            const int bit = __builtin_ctzll(word);
            word &= word - 1;
            const i64 n = k * 64 + bit;
            if (fits(rq, n, false) && passes(sig, n)) {
              *on_idle = true;  // no releasing capacity: fits_any == fits_idle
              return n;
            }
          }
        }
      }
      return -1;
    }
    return select_any(t, on_idle);
  }

  // ------------------------------------------------------------- node selection
  // A node's score is a sum, in registration order, of components that each depend on
  // the task and on that node alone, except binpack's, which also normalises the
  // node's free amount by the lowest and highest among the candidates.  ScoreInputs
  // holds, per component, the value it adds, or for binpack the free amount, plus
  // whether the node has capacity of the resource: equal inputs give equal scores.
  // Whether task t may go to node n (resources, predicates, load-aware filter); if so,
  // its score inputs.
  bool score_inputs(i64 t, i64 n, ScoreInputs& k) {
    if (in_.within != nullptr && !in_.within[n]) return false;
    if (!(fits_task(t, n, false) && passes(in_.task_sig[t], n) && la_passes(t, n))) return false;
    const i64 R = in_.R;
    const bool gpu_task = requests_gpu(t);
    const i64 res = gpu_task ? in_.gpu : in_.cpu;
    const bool binpack = gpu_task ? in_.gpu_binpack : in_.cpu_binpack;
    k.fill(0.0);
    for (i64 c = 0; c < in_.C; ++c) {
      const double scale = in_.comp_scale[c];
      double v = 0.0;
      switch (in_.comps[c]) {
        case kAvail:
          v = fits_task(t, n, true) ? scale : 0.0;
          break;
        case kGpuSharing:
          v = shared_task(t) && shared_any_[static_cast<std::size_t>(n)] + 1e-9 >= portion(t)
                  ? scale
                  : 0.0;
          break;
        case kResType:
          v = (!gpu_task && in_.allocatable[n * R + in_.gpu] <= 0) ? scale : 0.0;
          break;
        case kNominated:
          v = n == in_.task_nom[t] ? scale : 0.0;
          break;
        case kLoadAware:
          v = static_cast<double>(la_score(t, n)) * scale;
          break;
        case kPlacement: {
          const double na = idle(n)[res] + rel(n)[res];
          const double alloc = in_.allocatable[n * R + res];
          if (binpack) {
            v = na;  // normalised in score()
            k[kMaxInputs - 1] = alloc > 0.0 ? 1.0 : 0.0;
          } else {
            const double cap = gpu_task ? in_.cap_gpu[n] : alloc;
            v = cap > 0.0 ? na / cap : 0.0;
          }
          break;
        }
        default:
          v = 0.0;
      }
      k[static_cast<std::size_t>(c)] = v;
    }
    return true;
  }

  // Binpack's normalisation: the lowest and highest free amount among the candidates
  // with capacity of the resource.
  struct Range {
    bool any = false;
    double lo = 0.0, hi = 0.0;
  };

  bool binpack_class(i64 t) const {
    return requests_gpu(t) ? in_.gpu_binpack : in_.cpu_binpack;
  }

  // The node's score from its inputs: the same operations, in the same order, as the
  // plugins' score functions summed by the session.
  double score(i64 t, const ScoreInputs& k, const Range& range) const {
    const bool binpack = binpack_class(t);
    double s = 0.0;
    for (i64 c = 0; c < in_.C; ++c) {
      double v = k[static_cast<std::size_t>(c)];
      if (in_.comps[c] == kPlacement && binpack) {
        const double scale = in_.comp_scale[c];
        const double na = v;
        if (!range.any || range.hi == 0.0 || k[kMaxInputs - 1] == 0.0) {
          v = 0.0;
        } else if (range.lo == range.hi) {
          v = scale;
        } else {
          v = scale * (1.0 - (na - range.lo) / (range.hi - range.lo));
        }
      }
      s = s + v;
    }
    return s;
  }

  // The binpack input's position among the score inputs (-1: none).
  i64 binpack_input(i64 t) const {
    if (!binpack_class(t)) return -1;
    for (i64 c = 0; c < in_.C; ++c) {
      if (in_.comps[c] == kPlacement) return c;
    }
    return -1;
  }

  // Every node scored: the best (lowest-numbered on a tie) of those that may take t.
  i64 select_generic(i64 t, bool* on_idle) {
    cand_.clear();
    cand_inputs_.clear();
    const i64 b = binpack_input(t);
    Range range;
    ScoreInputs k;
    const i64* listed = in_.within_nodes;
    const i64 count = listed != nullptr ? in_.within_count : in_.N;
    const double gpus = req(t)[in_.gpu];
    for (i64 i = 0; i < count; ++i) {
      const i64 n = listed != nullptr ? listed[i] : i;
      // Most nodes of a busy cluster have no GPU room: fits() would say no first.
      if (!room(gpus, idle(n), rel(n), in_.gpu, false)) continue;
      if (!score_inputs(t, n, k)) continue;
      cand_.push_back(n);
      cand_inputs_.push_back(k);
      if (b >= 0 && k[kMaxInputs - 1] != 0.0) extend(range, k[static_cast<std::size_t>(b)]);
    }
    if (cand_.empty()) return -1;
    i64 best = -1;
    double best_score = 0.0;
    for (std::size_t i = 0; i < cand_.size(); ++i) {
      const double s = score(t, cand_inputs_[i], range);
      if (best < 0 || s > best_score) {
        best = cand_[i];
        best_score = s;
      }
    }
    *on_idle = fits_task(t, best, true);
    return best;
  }

  static void extend(Range& range, double na) {
    if (!range.any) {
      range.lo = range.hi = na;
      range.any = true;
    } else {
      if (na < range.lo) range.lo = na;
      if (na > range.hi) range.hi = na;
    }
  }

  // ---------------------------------------------------------------- node groups
  // Tasks alike (same request, constraint set, nominated node, fraction and load-aware
  // estimate) see the same score inputs on every node no placement touched since.  For
  // a class of tasks that comes back, the nodes are grouped by score inputs: each task
  // of the class then scores one node per group and re-reads only the nodes touched
  // since the class's last task.  A few classes are kept at once (tasks of a few shapes
  // interleave).  The result is select_generic's: the best score, on a tie the
  // lowest-numbered node.

  // What makes two tasks alike, written into `out`.
  void task_class(i64 t, std::vector<double>& out) const {
    out.clear();
    const double* rq = req(t);
    out.insert(out.end(), rq, rq + in_.R);
    out.push_back(static_cast<double>(in_.task_sig[t]));
    out.push_back(static_cast<double>(in_.task_nom[t]));
    out.push_back(portion(t));
    if (la_on_) {
      const i64* e = in_.la.estimates + t * in_.la.R;
      for (i64 r = 0; r < in_.la.R; ++r) out.push_back(static_cast<double>(e[r]));
      out.push_back(static_cast<double>(in_.la.task_flags[t]));
    }
  }

  static bool same(const std::vector<double>& a, const std::vector<double>& b) {
    return a.size() == b.size() &&
           std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
  }

  // The nodes grouped for one class of tasks.
  struct ClassGroups {
    std::vector<double> cls;
    i64 binpack = -1;  // binpack's input (binpack_input), -1: none
    i64 last_used = 0;
    std::unordered_map<ScoreInputs, std::set<i64>, InputsHash, InputsEq> groups;
    std::map<double, i64> free_counts;  // binpack: free amounts of grouped nodes with capacity
    // [N]: a grouped node's score inputs (read only where ``grouped``: left uninitialised,
    // as most nodes of a simulation's picks are outside its nodes).
    std::unique_ptr<ScoreInputs[]> inputs;
    std::vector<char> grouped, dirty_mark;
    std::vector<i64> dirty;
  };
  static constexpr std::size_t kClassGroups = 8;   // classes grouped at once
  static constexpr std::size_t kClassesSeen = 32;  // classes remembered to see them back

  i64 select_any(i64 t, bool* on_idle) {
    task_class(t, class_);
    ++select_count_;
    for (auto& cg : class_groups_) {
      if (same(cg->cls, class_)) {
        cg->last_used = select_count_;
        return select_grouped(*cg, t, on_idle);
      }
    }
    // A class seen before (and not found ungroupable) is grouped; a new one scanned.
    for (auto& [cls, groupable] : seen_) {
      if (!same(cls, class_)) continue;
      if (!groupable) return select_generic(t, on_idle);
      ClassGroups* cg = build_groups(t);
      if (cg != nullptr) return select_grouped(*cg, t, on_idle);
      groupable = false;  // about as many groups as nodes: scanning is as fast
      return select_generic(t, on_idle);
    }
    if (seen_.size() == kClassesSeen) seen_.erase(seen_.begin());
    seen_.emplace_back(class_, true);
    return select_generic(t, on_idle);
  }

  void group_insert(ClassGroups& cg, i64 t, i64 n) {
    ScoreInputs& k = cg.inputs[static_cast<std::size_t>(n)];
    if (!score_inputs(t, n, k)) return;
    cg.grouped[static_cast<std::size_t>(n)] = 1;
    cg.groups[k].insert(n);
    if (cg.binpack >= 0 && k[kMaxInputs - 1] != 0.0) {
      cg.free_counts[k[static_cast<std::size_t>(cg.binpack)]] += 1;
    }
  }

  void group_erase(ClassGroups& cg, i64 n) {
    if (!cg.grouped[static_cast<std::size_t>(n)]) return;
    cg.grouped[static_cast<std::size_t>(n)] = 0;
    const ScoreInputs& k = cg.inputs[static_cast<std::size_t>(n)];
    auto it = cg.groups.find(k);
    it->second.erase(n);
    if (it->second.empty()) cg.groups.erase(it);
    if (cg.binpack >= 0 && k[kMaxInputs - 1] != 0.0) {
      auto c = cg.free_counts.find(k[static_cast<std::size_t>(cg.binpack)]);
      if (--c->second == 0) cg.free_counts.erase(c);
    }
  }

  // Groups the nodes for task t's class (class_), in place of the least recently used
  // class when kClassGroups are kept; nullptr when the nodes hardly group.
  ClassGroups* build_groups(i64 t) {
    const auto N = static_cast<std::size_t>(in_.N);
    auto cg = std::make_unique<ClassGroups>();
    cg->binpack = binpack_input(t);
    cg->inputs.reset(new ScoreInputs[N]);
    cg->grouped.assign(N, 0);
    cg->dirty_mark.assign(N, 0);
    // The nodes the choice may use (all, or the listed ones: the others group nowhere).
    const i64* listed = in_.within_nodes;
    const i64 count = listed != nullptr ? in_.within_count : in_.N;
    for (i64 i = 0; i < count; ++i) {
      group_insert(*cg, t, listed != nullptr ? listed[i] : i);
      if (cg->groups.size() > N / 4 + 8) return nullptr;
    }
    cg->cls = class_;
    cg->last_used = select_count_;
    if (class_groups_.size() == kClassGroups) {
      auto lru = std::min_element(class_groups_.begin(), class_groups_.end(),
                                  [](const auto& a, const auto& b) {
                                    return a->last_used < b->last_used;
                                  });
      class_groups_.erase(lru);
    }
    class_groups_.push_back(std::move(cg));
    return class_groups_.back().get();
  }

  void group_touched(i64 n) {
    for (auto& cg : class_groups_) {
      if (cg->dirty_mark[static_cast<std::size_t>(n)]) continue;
      cg->dirty_mark[static_cast<std::size_t>(n)] = 1;
      cg->dirty.push_back(n);
    }
  }

  i64 select_grouped(ClassGroups& cg, i64 t, bool* on_idle) {
    for (i64 n : cg.dirty) {
      cg.dirty_mark[static_cast<std::size_t>(n)] = 0;
      group_erase(cg, n);
      group_insert(cg, t, n);
    }
    cg.dirty.clear();
    if (cg.groups.empty()) return -1;
    Range range;
    if (!cg.free_counts.empty()) {
      range.any = true;
      range.lo = cg.free_counts.begin()->first;
      range.hi = cg.free_counts.rbegin()->first;
    }
    i64 best = -1;
    double best_score = 0.0;
    for (const auto& [inputs, members] : cg.groups) {
      const double s = score(t, inputs, range);
      if (std::isnan(s)) return select_generic(t, on_idle);  // NaN: by position only
      const i64 first = *members.begin();
      if (best < 0 || s > best_score || (s == best_score && first < best)) {
        best = first;
        best_score = s;
      }
    }
    *on_idle = fits_task(t, best, true);
    return best;
  }


  // filter_nodes' rejection counts: [insufficient resources, predicate 0, ..., then the
  // load-aware reasons]; in fc_short_ / fc_free_, per resource, the nodes short of it
  // and the most they had free; for a fractional task, the nodes with no room on a
  // device and the most room one had (Session.resource_shortage).
  const std::vector<i64>& failure_counts(i64 t) {
    task_class(t, class_);
    if (fc_version_ == version_ && same(class_, fc_class_)) return fc_counts_;
    const double* rq = req(t);
    const i64 sig = in_.task_sig[t];
    const bool shared = shared_task(t);
    std::fill(fc_counts_.begin(), fc_counts_.end(), 0);
    std::fill(fc_short_.begin(), fc_short_.end(), 0);
    std::fill(fc_free_.begin(), fc_free_.end(), 0.0);
    fc_device_short_ = 0;
    fc_device_room_ = 0.0;
    for (i64 n = 0; n < in_.N; ++n) {
      const bool device_ok = !shared || shared_fits(t, n, false);
      if (!device_ok) {
        const auto k = static_cast<std::size_t>(n);
        const double room = std::max(
            std::max(std::max(shared_any_[k], shared_idle_[k]), 0.0),
            idle(n)[in_.gpu] + rel(n)[in_.gpu] >= 1.0 - 1e-9 ? 1.0 : 0.0);
        fc_device_room_ = fc_device_short_ == 0 ? room : std::max(fc_device_room_, room);
        fc_device_short_ += 1;
      }
      const bool resources_ok = fits(rq, n, false);
      if (!resources_ok) {
        const double* id = idle(n);
        const double* rl = rel(n);
        for (i64 r = 0; r < in_.R; ++r) {
          const double free = id[r] + rl[r];
          if (rq[r] == 0.0 || rq[r] <= free + EPS) continue;
          const std::size_t k = static_cast<std::size_t>(r);
          fc_free_[k] = fc_short_[k] == 0 ? free : std::max(fc_free_[k], free);
          fc_short_[k] += 1;
        }
      }
      if (!resources_ok || !device_ok) {
        fc_counts_[0] += 1;
        continue;
      }
      bool rejected = false;
      for (i64 p = 0; p < in_.P; ++p) {
        if (!pmask(sig, p)[n]) {
          fc_counts_[static_cast<std::size_t>(1 + p)] += 1;
          rejected = true;
          break;
        }
      }
      if (rejected || !la_on_) continue;
      const i64 code = la_code(t, n);
      if (code == loadaware::kCodePass) continue;
      const LoadAware& la = in_.la;
      const i64 profile = (la.task_flags[t] & kProdPod) ? 1 : 0;
      const i64 slot = code == loadaware::kCodeExpired
                           ? la.expired_reason
                           : la.reason_slot[profile * in_.N + n] + code;
      fc_counts_[static_cast<std::size_t>(1 + in_.P + slot)] += 1;
    }
    fc_version_ = version_;
    fc_class_ = class_;
    return fc_counts_;
  }

  // ---------------------------------------------------------- node accounting
  // Task t joins node n (pipelined onto releasing capacity, or on idle); a fractional
  // task joins device h (-1: opens one).  Returns its device (-1: none).
  i64 place(i64 n, i64 t, bool pipelined, i64 h = -1) {
    const double* r = req(t);
    double* u = used(n);
    for (i64 k = 0; k < in_.R; ++k) u[k] = u[k] + r[k];
    if (pipelined) {
      double* rl = rel(n);
      for (i64 k = 0; k < in_.R; ++k) rl[k] = rl[k] - r[k];
      releasing_changed();
    } else {
      double* id = idle(n);
      for (i64 k = 0; k < in_.R; ++k) id[k] = id[k] - r[k];
    }
    if (shared_task(t)) h = update_group(t, n, h, 1, pipelined);
    la_account(n, t, 1);
    touched(n);
    return h;
  }

  // Undoes place() (h: the device it returned).
  void unplace(i64 n, i64 t, bool pipelined, i64 h) {
    const double* r = req(t);
    double* u = used(n);
    for (i64 k = 0; k < in_.R; ++k) u[k] = u[k] - r[k];
    if (pipelined) {
      double* rl = rel(n);
      for (i64 k = 0; k < in_.R; ++k) rl[k] = rl[k] + r[k];
      releasing_changed();
    } else {
      double* id = idle(n);
      for (i64 k = 0; k < in_.R; ++k) id[k] = id[k] + r[k];
    }
    if (h >= 0) update_group(t, n, h, -1, pipelined);
    la_account(n, t, -1);
    touched(n);
  }

  // ------------------------------------------------------------------ attempt
  void record(i64 j, i64 kind, i64 first, i64 count, i64 info, i64 flags, i64 active) {
    out_.att_job.push_back(j);
    out_.att_kind.push_back(kind);
    out_.att_first.push_back(first);
    out_.att_count.push_back(count);
    out_.att_info.push_back(info);
    out_.att_flags.push_back(flags);
    out_.att_active.push_back(active);
    if (kind < kOverLimit) return;
    // zero rows, filled in by the caller
    out_.att_vec.resize(out_.att_vec.size() + 6);
    out_.att_fail.resize(out_.att_fail.size() + fc_counts_.size());
    out_.att_short.resize(out_.att_short.size() + static_cast<std::size_t>(in_.R));
    out_.att_free.resize(out_.att_free.size() + static_cast<std::size_t>(in_.R));
    out_.att_device_short.push_back(0);
    out_.att_device_room.push_back(0.0);
  }

  void attempt(i64 j) {
    i64 first, count;
    chunk(j, &first, &count);
    const i64 pl0 = static_cast<i64>(out_.pl_task.size());
    if (count == 0) {
      record(j, kNoTasks, pl0, 0, -1, 0, active_[j]);
      return;
    }
    i64 queue = -1;
    double vec[6];
    const i64 over = over_capacity(j, first, count, &queue, vec);
    if (over != kOk) {
      record(j, over, pl0, 0, queue, 0, active_[j]);
      double* v = out_.att_vec.data() + out_.att_vec.size() - 6;
      for (int k = 0; k < 6; ++k) v[k] = vec[k];
      return;
    }
    const i64 active_before = active_[j];
    const bool had_allocated = allocset_[j] > 0;
    i64 placed = 0;
    for (i64 t = first; t < first + count; ++t) {
      bool on_idle = false;
      const i64 n = select(t, &on_idle);
      if (n < 0) {
        const std::vector<i64>& fc = failure_counts(t);
        // a failed chunk: first = tasks placed before the failure, count = chunk size
        record(j, kNoNode, placed, count, t, 0, active_before);
        i64* f = out_.att_fail.data() + out_.att_fail.size() - fc.size();
        for (std::size_t k = 0; k < fc.size(); ++k) f[k] = fc[k];
        i64* sh = out_.att_short.data() + out_.att_short.size() - in_.R;
        double* fr = out_.att_free.data() + out_.att_free.size() - in_.R;
        for (i64 k = 0; k < in_.R; ++k) {
          sh[k] = fc_short_[static_cast<std::size_t>(k)];
          fr[k] = fc_free_[static_cast<std::size_t>(k)];
        }
        out_.att_device_short.back() = fc_device_short_;
        out_.att_device_room.back() = fc_device_room_;
        // roll back, newest first
        for (i64 k = placed - 1; k >= 0; --k) {
          const std::size_t at = static_cast<std::size_t>(pl0 + k);
          const i64 tt = out_.pl_task[at], nn = out_.pl_node[at];
          const bool pipe = out_.pl_pipe[at] != 0;
          unplace(nn, tt, pipe, out_.pl_group[at]);
          active_[j] -= 1;
          if (pipe) {
            pipelined_[j] -= 1;
          } else {
            nonpipe_[j] -= 1;
          }
          charge(j, tt, -1, np_charge(j, false));
        }
        out_.pl_task.resize(static_cast<std::size_t>(pl0));
        out_.pl_node.resize(static_cast<std::size_t>(pl0));
        out_.pl_pipe.resize(static_cast<std::size_t>(pl0));
        out_.pl_group.resize(static_cast<std::size_t>(pl0));
        jreq_ok_[j] = 0;
        return;
      }
      bool pipe = !on_idle;
      i64 device = -1;
      if (shared_task(t)) {
        bool device_idle = false;
        if (!choose_group(t, n, &device, &device_idle)) {
          // The filter promised a device: never reached.  The caller takes the
          // slow path, which reports what happened.
          out_.aborted = true;
          return;
        }
        pipe = !(on_idle && device_idle);
      }
      device = place(n, t, pipe, device);
      active_[j] += 1;
      if (pipe) {
        pipelined_[j] += 1;
      } else {
        nonpipe_[j] += 1;
      }
      charge(j, t, +1, np_charge(j, true));
      out_.pl_task.push_back(t);
      out_.pl_node.push_back(n);
      out_.pl_pipe.push_back(pipe ? 1 : 0);
      out_.pl_group.push_back(device);
      ++placed;
    }
    // should_pipeline_job: a gang with a pipelined task not ready without it
    if (pipelined_[j] > 0 && nonpipe_[j] < in_.job_min[j]) {
      for (i64 k = 0; k < placed; ++k) {
        const std::size_t at = static_cast<std::size_t>(pl0 + k);
        if (out_.pl_pipe[at]) continue;
        const i64 tt = out_.pl_task[at], nn = out_.pl_node[at];
        const double* r = req(tt);
        double* u = used(nn);
        double* id = idle(nn);
        double* rl = rel(nn);
        const i64 device = out_.pl_group[at];
        for (i64 x = 0; x < in_.R; ++x) u[x] = u[x] - r[x];
        for (i64 x = 0; x < in_.R; ++x) id[x] = id[x] + r[x];
        if (device >= 0) update_group(tt, nn, device, -1, false);
        for (i64 x = 0; x < in_.R; ++x) u[x] = u[x] + r[x];
        for (i64 x = 0; x < in_.R; ++x) rl[x] = rl[x] - r[x];
        if (device >= 0) update_group(tt, nn, device, 1, true);
        releasing_changed();
        touched(nn);
        out_.pl_pipe[at] = 1;
        nonpipe_[j] -= 1;
        pipelined_[j] += 1;
      }
    }
    i64 binds = 0;
    for (i64 k = 0; k < placed; ++k) {
      if (!out_.pl_pipe[static_cast<std::size_t>(pl0 + k)]) ++binds;
    }
    const i64 flags = (pipelined_[j] > 0 ? 1 : 0) | (had_allocated ? 2 : 0);
    record(j, kOk, pl0, placed, -1, flags, active_before);
    allocset_[j] += binds;
    ptr_[j] += placed;
    jreq_ok_[j] = 0;
    if (ptr_[j] < in_.job_start[j + 1]) push(j);
  }

 public:
  // The node the loop would choose for task 0 (-1: none), every node scored: the
  // general path's choice for one task (kai.actions.common.allocate_task).
  i64 select_one(bool* on_idle) {
    init_shared();  // the input has no load-aware form (la_on_ stays false)
    cand_.reserve(static_cast<std::size_t>(in_.N));
    return select_generic(0, on_idle);
  }

  // select_one's choice through the node groups of task 0's class (select_any): for a
  // caller that picks many tasks alike and reports each node it changes (node_changed).
  i64 select_one_alike(bool* on_idle) {
    if (!alike_ready_) {
      init_shared();
      cand_.reserve(static_cast<std::size_t>(in_.N));
      alike_ready_ = true;
    }
    return select_any(0, on_idle);
  }

  void node_changed(i64 n) { touched(n); }

  void set_jobs(const i64* active, const i64* nonpipe, const i64* pipelined,
                const i64* allocset) {
    const auto J = static_cast<std::size_t>(in_.J);
    active_.assign(active, active + J);
    nonpipe_.assign(nonpipe, nonpipe + J);
    pipelined_.assign(pipelined, pipelined + J);
    allocset_.assign(allocset, allocset + J);
  }
};

}  // namespace

void run(const Input& in, Output& out) {
  Loop loop(in, out);
  loop.set_jobs(in.job_active, in.job_nonpipe, in.job_pipelined, in.job_allocset);
  loop.run();
}

i64 select_node(const Input& in, const double* idle, const double* releasing, bool* on_idle) {
  return NodeChooser(in).choose(idle, releasing, on_idle);
}

struct NodeChooser::State {
  explicit State(const Input& in) : loop(in, out) {}
  Output out;
  Loop loop;
};

NodeChooser::NodeChooser(const Input& in) : state_(std::make_unique<State>(in)) {}

NodeChooser::~NodeChooser() = default;

i64 NodeChooser::choose(const double* idle, const double* releasing, bool* on_idle) {
  state_->loop.read_matrices(idle, releasing);
  return state_->loop.select_one(on_idle);
}

i64 NodeChooser::choose_alike(const double* idle, const double* releasing, bool* on_idle) {
  state_->loop.read_matrices(idle, releasing);
  return state_->loop.select_one_alike(on_idle);
}

void NodeChooser::changed(i64 n) { state_->loop.node_changed(n); }

}  // namespace kai::alloc
