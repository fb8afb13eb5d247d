// kai native core: a victim-search simulation's re-placement (see kai/simulation.hpp).  Each step mirrors kai.actions.solvers.simulate and the code it
// calls, named where it happens; the floating-point operations are theirs, in their
// order (kai.api.model.charge_rows for the node rows, the proportion plugin's charges
// for the queues).
#include "kai/simulation.hpp"

#include <cstring>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "kai/common.hpp"

namespace kai::alloc {
namespace {

class Replacer {
 public:
  Replacer(const Input& picker, const Replacement& s)
      : s_(s), in_(picker), chooser_(in_), N_(picker.N), R_(picker.R) {
    const auto nr = static_cast<std::size_t>(N_ * R_);
    idle_.assign(s.idle, s.idle + nr);
    rel_.assign(s.releasing, s.releasing + nr);
    const auto q3 = static_cast<std::size_t>(s.Q * 3);
    alloc_.assign(s.q_alloc, s.q_alloc + q3);
    alloc_np_.assign(s.q_alloc_np, s.q_alloc_np + q3);
    base_pos_.assign(s.base_start, s.base_start + s.Q);
    own_pos_.assign(s.own_start, s.own_start + s.Q);
    remaining_ = s.M;
    popped_.assign(static_cast<std::size_t>(s.M), false);
    in_.T = 1;
    in_.S = 1;
    in_.P = s.P;
    in_.within = s.within;
    for (i64 n = 0; n < N_; ++n) {
      if (s.within[n]) within_nodes_.push_back(n);
    }
    in_.within_nodes = within_nodes_.data();
    in_.within_count = static_cast<i64>(within_nodes_.size());
    in_.pred = s.masks;  // a pod's constraint set is its signature
    in_.task_sig = &sig_;
    alike_ = s.p_task_start[s.M] >= s.alike_from;
    evict();
  }

  void copy_rows(std::vector<double>* idle, std::vector<double>* releasing) const {
    if (idle != nullptr) *idle = idle_;
    if (releasing != nullptr) *releasing = rel_;
  }

  // simulate(): pop the participants in queue order, re-place the victims' jobs, and
  // stop at the preemptor, or (``every_victim``) go on with the victims' jobs left.
  Replaced run() {
    for (;;) {
      const i64 m = pop();
      if (aborted_) return Replaced::kUndecided;
      if (m < 0) return Replaced::kPreemptorLeft;  // the preemptor never came
      if (m == s_.preemptor) {
        if (!place_preemptor()) return Replaced::kPreemptorLeft;
        return s_.every_victim || s_.steps ? follow_victims() : Replaced::kPlaced;
      }
      if (may_place(m)) allocate_job(m);
    }
  }

 private:
  // The rest of simulate()'s loop once the preemptor is placed: it stops when no job
  // left may be placed (skipping them all would change nothing), as its GPU-room check
  // does.
  Replaced follow_victims() {
    while (any_may_place()) {
      const i64 m = pop();
      if (aborted_) return Replaced::kUndecided;
      if (m < 0) break;
      if (may_place(m)) allocate_job(m);
    }
    return replaced_ == s_.V ? Replaced::kPlaced : Replaced::kVictimLeft;
  }

  bool any_may_place() {
    const double most = most_free();
    for (i64 m = 0; m < s_.M; ++m) {
      const double need = s_.p_gpu_need[m];
      if (!popped_[static_cast<std::size_t>(m)] && (need <= 0 || need <= most + s_.count_slack)) {
        return true;
      }
    }
    return false;
  }

  void record(Step kind, i64 a, i64 b) {
    if (s_.steps == nullptr) return;
    s_.steps->push_back(static_cast<i64>(kind));
    s_.steps->push_back(a);
    s_.steps->push_back(b);
  }

  // A pod of the victims (evicted by the simulation), not a pending one.
  bool victim(i64 t) const { return s_.t_evicted_from[t] >= 0 || s_.t_vacated_at[t] >= 0; }

  // A case the arrays cannot decide (a queue order tie left to queue names).
  bool aborted_ = false;

  const Replacement& s_;
  Input in_;  // the one-task input, its task fields set at each pick
  NodeChooser chooser_;
  const i64 N_, R_;
  i64 sig_ = 0;  // the constraint set of the pod being placed
  bool alike_ = false;
  std::vector<double> idle_, rel_, alloc_, alloc_np_;
  std::vector<i64> base_pos_, own_pos_;
  std::vector<i64> within_nodes_;  // the nodes the simulation may place on, ascending
  i64 remaining_ = 0;
  std::vector<bool> popped_;  // [M]: the participants popped so far
  // most_free(): the most room, while most_known_; once the node with the most has lost
  // some after a scan, how many nodes within have each room instead (rooms_, empty until
  // then: a node within changed, so there is one), moved with every row change, so that
  // filling the node with the most needs no scan of the others.
  double most_ = 0.0;
  bool most_known_ = false, scanned_ = false;
  std::map<double, i64> rooms_;
  i64 replaced_ = 0;          // the victims placed again

  // Statement.evict of each victim, in order: its request releasing on its node, and its
  // queue's allocation down.  A victim on idle capacity (running, or bound) leaves it
  // releasing; one pipelined in the session is taken off the releasing capacity it was
  // pipelined on, which its vacated place holds instead, and a moved one frees the place
  // it held where it runs (Statement._apply_unplace).
  void evict() {
    for (i64 v = 0; v < s_.V; ++v) {
      const double* r = s_.v_req + v * R_;
      const i64 n = s_.v_node[v];
      if (s_.v_pipelined[v]) {
        rows(n, r, kPipelined, false);
        rows(n, r, kReleasing, true);
        if (s_.v_held[v] >= 0) rows(s_.v_held[v], r, kReleasing, false);
      } else {
        rows(n, r, kIdle, false);
        rows(n, r, kReleasing, true);
      }
      charge(s_.v_leaf[v], s_.v_qvec + v * 3, s_.v_np[v], false);
    }
  }

  // ------------------------------------------------------------- the queue's leaves
  // kai.actions.solvers.pending._Leaf: the next base entry that is not skipped (its
  // index, or -1), moving the position past the skipped ones.
  i64 base_head(i64 q) {
    i64& pos = base_pos_[static_cast<std::size_t>(q)];
    const i64 end = s_.base_start[q + 1];
    while (pos < end && s_.base_skipped[pos]) ++pos;
    return pos < end ? pos : -1;
  }

  i64 own_head(i64 q) const {
    const i64 at = own_pos_[static_cast<std::size_t>(q)];
    return at < s_.own_start[q + 1] ? s_.own[at] : -1;
  }

  // The head of leaf q: a participant (>= 0), a base entry (-2 - index), or -1.
  i64 head(i64 q) {
    const i64 b = base_head(q);
    const i64 m = own_head(q);
    if (b < 0) return m;
    if (m < 0 || b < s_.p_before[m]) return -2 - b;
    return m;
  }

  i64 pop_leaf(i64 q) {
    const i64 h = head(q);
    if (h >= 0) {
      own_pos_[static_cast<std::size_t>(q)] += 1;
    } else if (h < -1) {
      base_pos_[static_cast<std::size_t>(q)] += 1;
    }
    return h;
  }

  const double* request_of(i64 h) const {
    return h >= 0 ? s_.p_request + h * 3 : s_.base_request + (-2 - h) * 3;
  }

  // ------------------------------------------------------------- the queue order
  // JobQueue._best / _best_among: the best (leaf, head) under queue q.
  bool best(i64 q, i64* leaf, i64* job) {
    const i64 h = head(q);
    if (h != -1) {
      *leaf = q;
      *job = h;
      return true;
    }
    return best_among(q, leaf, job);
  }

  bool best_among(i64 parent, i64* leaf, i64* job) {
    bool found = false;
    i64 best_q = -1;
    for (i64 k = s_.kid_start[parent]; k < s_.kid_start[parent + 1]; ++k) {
      const i64 c = s_.kids[k];
      i64 cl, cj;
      if (!best(c, &cl, &cj)) continue;
      if (!found || better(c, cj, best_q, *job)) {
        found = true;
        best_q = c;
        *leaf = cl;
        *job = cj;
      }
    }
    return found;
  }

  bool better(i64 l, i64 lj, i64 r, i64 rj) {
    const int order = queue_order(s_.rules, alloc_.data(), l, r, request_of(lj), request_of(rj));
    if (order == 0) aborted_ = true;  // Session.queue_order would compare names
    return order < 0;
  }

  // SimulationQueue.pop: the next participant (-1: none left).
  i64 pop() {
    while (remaining_ > 0 && !aborted_) {
      i64 live = -1, count = 0;
      for (i64 q = 0; q < s_.Q; ++q) {
        if (own_head(q) >= 0) {
          live = q;
          ++count;
        }
      }
      if (count == 1) {
        // No other leaf has a participant left: this leaf's come in its own order.
        const i64 m = own_head(live);
        own_pos_[static_cast<std::size_t>(live)] += 1;
        --remaining_;
        popped_[static_cast<std::size_t>(m)] = true;
        return m;
      }
      i64 leaf, job;
      if (!best_among(s_.Q, &leaf, &job)) return -1;
      const i64 h = pop_leaf(leaf);
      if (h >= 0) {
        --remaining_;
        popped_[static_cast<std::size_t>(h)] = true;
        return h;
      }
      skip_alike(leaf, h);
    }
    return -1;
  }

  // SimulationQueue._skip_alike: the stand-ins after ``skipped`` that ask the same.
  void skip_alike(i64 q, i64 skipped) {
    const double* key = request_of(skipped);
    for (;;) {
      const i64 h = head(q);
      if (h >= -1 || std::memcmp(request_of(h), key, 3 * sizeof(double)) != 0) return;
      pop_leaf(q);
    }
  }

  // ------------------------------------------------------------- placements
  i64 first(i64 m) const { return s_.p_task_start[m]; }
  i64 last(i64 m) const { return s_.p_task_start[m + 1]; }

  // simulate._GpuRoom.may_place
  bool may_place(i64 m) {
    const double need = s_.p_gpu_need[m];
    return need <= 0 || need <= most_free() + s_.count_slack;
  }

  // simulate._GpuRoom.most: the most idle + releasing GPUs of a node it may use.  Asked
  // at every participant's turn, it is kept as the rows change (rows(): see most_).
  double most_free() {
    if (!rooms_.empty()) return rooms_.rbegin()->first;
    if (!most_known_) {
      if (scanned_) {  // scanned before: count the nodes per room from now on
        for (const i64 n : within_nodes_) rooms_[gpu_free(n)] += 1;
        return rooms_.rbegin()->first;
      }
      double most = -std::numeric_limits<double>::infinity();
      for (const i64 n : within_nodes_) {
        const double free = gpu_free(n);
        if (free > most) most = free;
      }
      most_ = most;
      most_known_ = scanned_ = true;
    }
    return most_;
  }

  double gpu_free(i64 n) const { return idle_[n * R_ + in_.gpu] + rel_[n * R_ + in_.gpu]; }

  // Node n's GPU room went from ``before`` to its value now.
  void room_changed(i64 n, double before) {
    if (!s_.within[n]) return;
    const double now = gpu_free(n);
    if (!rooms_.empty()) {
      if (now == before) return;
      const auto it = rooms_.find(before);
      if (--it->second == 0) rooms_.erase(it);
      rooms_[now] += 1;
    } else if (most_known_) {
      if (now > most_) {
        most_ = now;
      } else if (before == most_ && now < most_) {
        most_known_ = false;  // it may have been the only one with the most
      }
    }
  }

  // proportion.job_over_capacity of participant m's pods
  bool over_capacity(i64 m) const {
    double request[3] = {0.0, 0.0, 0.0}, np_request[3] = {0.0, 0.0, 0.0};
    const i64 np_end = first(m) + s_.p_np_count[m];
    for (i64 t = first(m); t < last(m); ++t) {
      const double* v = s_.t_qvec + t * 3;
      for (int r = 0; r < 3; ++r) request[r] = request[r] + v[r];
      if (t < np_end) {
        for (int r = 0; r < 3; ++r) np_request[r] = np_request[r] + v[r];
      }
    }
    i64 queue;
    double vec[6];
    return kai::alloc::over_capacity(s_.rules, alloc_.data(), alloc_np_.data(), s_.p_leaf[m],
                                     request, s_.p_np_count[m] > 0, np_request, &queue,
                                     vec) != kFits;
  }

  // NodePicker.pick: the node for pod t, -1 if none.
  i64 pick(i64 t) {
    in_.task_req = s_.t_req + t * R_;
    sig_ = s_.t_mask[t];
    in_.task_nom = s_.t_nominated + t;
    bool on_idle = false;
    if (alike_) return chooser_.choose_alike(idle_.data(), rel_.data(), &on_idle);
    return chooser_.choose(idle_.data(), rel_.data(), &on_idle);
  }

  // charge_rows for one node, idle / releasing by the kind (``used``, which no choice
  // here reads, is not kept).
  enum Rows { kIdle, kReleasing, kPipelined };
  void rows(i64 n, i64 t, Rows kind, bool add) { rows(n, s_.t_req + t * R_, kind, add); }
  void rows(i64 n, const double* r, Rows kind, bool add) {
    if (alike_) chooser_.changed(n);
    const double before = gpu_free(n);
    double* id = idle_.data() + n * R_;
    double* rl = rel_.data() + n * R_;
    for (i64 k = 0; k < R_; ++k) {
      if (add) {
        if (kind == kReleasing) {
          rl[k] = rl[k] + r[k];
          id[k] = id[k] - r[k];
        } else if (kind == kPipelined) {
          rl[k] = rl[k] - r[k];
        } else {
          id[k] = id[k] - r[k];
        }
      } else {
        if (kind == kReleasing) {
          rl[k] = rl[k] - r[k];
          id[k] = id[k] + r[k];
        } else if (kind == kPipelined) {
          rl[k] = rl[k] + r[k];
        } else {
          id[k] = id[k] + r[k];
        }
      }
    }
    room_changed(n, before);
  }

  // The proportion plugin's _charge of an allocate (add) or deallocate event.
  void charge(i64 m, i64 t, bool add) {
    charge(s_.p_leaf[m], s_.t_qvec + t * 3, s_.p_np_charge[m], add);
  }
  void charge(i64 leaf, const double* v, bool np, bool add) {
    const i64* p = s_.rules.path_of(leaf);
    for (i64 k = s_.rules.path_len(leaf) - 1; k >= 0; --k) {
      double* a = alloc_.data() + p[k] * 3;
      double* anp = alloc_np_.data() + p[k] * 3;
      for (int r = 0; r < 3; ++r) {
        a[r] = add ? a[r] + v[r] : a[r] - v[r];
        if (np) anp[r] = add ? anp[r] + v[r] : anp[r] - v[r];
      }
    }
  }

  // How place() put a pod that the session had placed (and the simulation evicted)
  // back on the node it left: its placement restored, or (the node could no longer
  // hold it) pipelined onto its vacated place.
  enum Placed : i64 { kPlain = 0, kRestored = 1, kRetook = 2 };

  // Statement._restore_unplaced's check: the node holds more than it has (``bound``: a
  // pod bound there also needs the idle capacity).
  bool overcommitted(i64 n, bool bound = true) const {
    const double* id = idle_.data() + n * R_;
    const double* rl = rel_.data() + n * R_;
    for (i64 k = 0; k < R_; ++k) {
      if (id[k] + rl[k] < -EPS || (bound && id[k] < -EPS)) return true;
    }
    return false;
  }

  // Statement.pipeline of pod t on node n: a victim put back where it was is
  // un-evicted (undo of its eviction), one placed elsewhere leaves its old place
  // releasing (NodeTable.hold), a pending pod is pipelined.  A pod the session had
  // placed, back on a node of its vacated places, gets its placement back where it was
  // (Statement._restore_unplaced): bound again, or pipelined again (a moved pod also
  // holding its old place again); where that node can no longer hold it, it is evicted
  // again and pipelined on n, taking its vacated place there.  (A bound pod has no
  // older vacated place, nor a held one.)
  i64 place(i64 m, i64 t, i64 n) {
    const i64 back = s_.t_vacated_at[t];
    if (back >= 0 && (back == n || s_.t_also[t] == n)) {
      const bool pipelined = s_.t_pipelined_back[t];
      const Rows kind = pipelined ? kPipelined : kIdle;
      const i64 held = s_.t_held_at[t];
      rows(back, t, kReleasing, false);  // its vacated place, freed
      if (held >= 0) rows(held, t, kReleasing, true);
      rows(back, t, kind, true);  // placed there again
      charge(m, t, true);
      if (!overcommitted(back, !pipelined)) return kRestored;
      rows(back, t, kind, false);  // evicted again (a new vacated place) ...
      rows(back, t, kReleasing, true);
      if (held >= 0) rows(held, t, kReleasing, false);
      charge(m, t, false);
      rows(n, t, kReleasing, false);  // ... and pipelined on n, taking its place there
      rows(n, t, kPipelined, true);
      charge(m, t, true);
      return kRetook;
    }
    const i64 from = s_.t_evicted_from[t];
    if (from >= 0) {
      rows(from, t, kReleasing, false);
      rows(from, t, from == n ? kIdle : kReleasing, true);
    }
    if (from != n) rows(n, t, kPipelined, true);
    charge(m, t, true);
    return kPlain;
  }

  // Statement._undo of place() (``how``: what it returned).
  void unplace(i64 m, i64 t, i64 n, i64 how) {
    if (how == kRestored) {  // Statement._apply_unplace, where it was placed back
      const i64 back = s_.t_vacated_at[t], held = s_.t_held_at[t];
      rows(back, t, s_.t_pipelined_back[t] ? kPipelined : kIdle, false);
      rows(back, t, kReleasing, true);  // the vacated place, held again
      if (held >= 0) rows(held, t, kReleasing, false);
      charge(m, t, false);
      return;
    }
    if (how == kRetook) {
      rows(n, t, kPipelined, false);
      rows(n, t, kReleasing, true);  // the vacated place it took, held again
      charge(m, t, false);
      return;
    }
    const i64 from = s_.t_evicted_from[t];
    if (from == n) {
      rows(from, t, kIdle, false);
      rows(from, t, kReleasing, true);
    } else {
      rows(n, t, kPipelined, false);
      if (from >= 0) {
        rows(from, t, kReleasing, false);
        rows(from, t, kReleasing, true);
      }
    }
    charge(m, t, false);
  }

  // kai.actions.common.allocate_job (pipelines only): its pods all, or none.
  void allocate_job(i64 m) {
    if (first(m) == last(m) || over_capacity(m)) return;
    record(Step::kCheckpoint, m, -1);
    std::vector<std::pair<i64, i64>> placed;  // (node, how)
    for (i64 t = first(m); t < last(m); ++t) {
      const i64 n = pick(t);
      if (n < 0) {
        for (i64 k = static_cast<i64>(placed.size()) - 1; k >= 0; --k) {
          const auto& [node, how] = placed[static_cast<std::size_t>(k)];
          unplace(m, first(m) + k, node, how);
        }
        record(Step::kRollback, m, -1);
        return;
      }
      const i64 how = place(m, t, n);
      record(how == kRetook ? Step::kRetake : Step::kPlace, t, n);
      placed.emplace_back(n, how);
    }
    for (i64 t = first(m); t < last(m); ++t) replaced_ += victim(t) ? 1 : 0;
  }

  // simulate.place_tasks for the preemptor: whole, or the simulation fails.
  bool place_preemptor() {
    const i64 m = s_.preemptor;
    if (over_capacity(m)) return false;
    for (i64 t = first(m); t < last(m); ++t) {
      const i64 n = pick(t);
      if (n < 0) return false;
      const i64 how = place(m, t, n);
      record(how == kRetook ? Step::kRetake : Step::kPlace, t, n);
    }
    return true;
  }
};

}  // namespace

Replaced replace_victims(const Input& picker, const Replacement& sim) {
  Replacer replacer(picker, sim);
  const Replaced outcome = replacer.run();
  if (outcome == Replaced::kPlaced || outcome == Replaced::kVictimLeft) {
    replacer.copy_rows(sim.final_idle, sim.final_releasing);
  }
  return outcome;
}

}  // namespace kai::alloc
